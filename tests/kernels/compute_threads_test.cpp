// kernels/compute_threads.h: `--threads N` bounds the BLAS that LibTorch calls, not only
// LibTorch's own pool. Checked through OpenBLAS's own getter; where the process's BLAS is not
// OpenBLAS (another libblas.so.3 alternative) there is nothing to bound, and the test says so.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "kernels/compute_threads.h"

namespace qeval::kernels {
namespace {

TEST(ComputeThreads, SetsLibTorchAndOpenBlasThreads) {
  const int before = at::get_num_threads();
  // Two settings, so that neither can pass by being OpenBLAS's default (one thread per core).
  for (int threads : {2, 1}) {
    set_compute_threads(threads);
    EXPECT_EQ(at::get_num_threads(), threads);
    const std::optional<int> blas = blas_threads();
    if (!blas) {
      set_compute_threads(before);
      GTEST_SKIP() << "this process's BLAS is not OpenBLAS (no openblas_get_num_threads): nothing else to bound";
    }
    EXPECT_EQ(*blas, threads);
  }
  set_compute_threads(before);
}

TEST(ComputeThreads, InferenceThreadsSizeLibTorchAndKeepOpenBlasOnOneThread) {
  const int before = at::get_num_threads();
  EXPECT_GE(available_cores(), 1);
  for (int threads : {2, 1}) {
    set_inference_threads(threads);
    EXPECT_TRUE(inference_threading());
    EXPECT_EQ(at::get_num_threads(), threads);
    if (const std::optional<int> blas = blas_threads()) EXPECT_EQ(*blas, 1);
  }
  set_compute_threads(before);
  EXPECT_FALSE(inference_threading());
}

}  // namespace
}  // namespace qeval::kernels
