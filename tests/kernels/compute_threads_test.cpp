// kernels/compute_threads.h: `--threads N` bounds the BLAS that LibTorch calls, not only
// LibTorch's own pool. Checked through OpenBLAS's own getter; where the process's BLAS is not
// OpenBLAS (another libblas.so.3 alternative) there is nothing to bound, and the test says so.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <atomic>

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

// at::parallel_for is a header template, parallel only where the calling code is compiled with
// OpenMP (CMakeLists.txt: QEVAL_OPENMP adds it to every target that links LibTorch, this test's
// too). Without the flag every chunk ran on thread 0 whatever --threads said (issue 34).
TEST(ComputeThreads, ParallelForInOurOwnCodeRunsOnEveryThread) {
#if defined(__clang__)
  GTEST_SKIP() << "clang builds (the fuzz preset) are built without OpenMP: at::parallel_for is serial there";
#else
  const int before = at::get_num_threads();
  set_inference_threads(2);
  std::atomic<unsigned> seen{0};
  at::parallel_for(0, 64, 1, [&](std::int64_t, std::int64_t) { seen |= 1u << at::get_thread_num(); });
  set_compute_threads(before);
  EXPECT_EQ(seen.load(), 3u) << "bit t set: thread t ran a chunk";
#endif
}

}  // namespace
}  // namespace qeval::kernels
