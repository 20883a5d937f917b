// The fp32 GEMM of the full-precision linears (kernels/fp32_gemm.h): every backend against a
// float64 product on random inputs (shapes of the real models included), and the same bits for 1
// and 2 threads, which the evaluator's thread-count independence relies on. (The same bits for a
// row alone and among more rows are not promised: a GEMM's rounding may depend on M, which is
// why linears run one sequence per call.)
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "kernels/compute_threads.h"
#include "kernels/fp32_gemm.h"
#include "tests/support/test_data.h"

namespace qeval::kernels {
namespace {

struct Shape {
  std::int64_t M, K, N;
};

class Fp32GemmShapes : public ::testing::TestWithParam<Shape> {};

// |y − y64| ≤ 1e-6 · Σ_k |x||w| + |b| per element: fp32 accumulation of K products.
::testing::AssertionResult close_to_float64(const at::Tensor& y, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  at::Tensor x64 = x.to(at::kDouble), w64 = w.to(at::kDouble);
  at::Tensor exact = at::matmul(x64, w64.t()) + (b.defined() ? b.to(at::kDouble) : at::zeros({w.size(0)}, at::kDouble));
  at::Tensor bound = 1e-6 * (at::matmul(x64.abs(), w64.abs().t()) + (b.defined() ? b.to(at::kDouble).abs() : at::zeros({w.size(0)}, at::kDouble))) + 1e-30;
  at::Tensor excess = (y.to(at::kDouble) - exact).abs() / bound;
  if (excess.max().item<double>() <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "error exceeds the fp32 bound by " << excess.max().item<double>() << "x";
}

TEST_P(Fp32GemmShapes, EveryBackendIsCloseToFloat64AndThreadCountsGiveTheSameBits) {
  const Shape s = GetParam();
  at::manual_seed(s.M * 7919 + s.K * 31 + s.N);
  at::Tensor x = at::randn({s.M, s.K}), w = at::randn({s.N, s.K}) / 8, b = at::randn({s.N});
  for (Fp32GemmBackend backend : {Fp32GemmBackend::aten, Fp32GemmBackend::onednn, Fp32GemmBackend::automatic}) {
    if (backend == Fp32GemmBackend::onednn && fp32_gemm_cpu_backend() != Fp32GemmBackend::onednn) continue;
    for (bool with_bias : {false, true}) {
      const at::Tensor bias = with_bias ? b : at::Tensor();
      const int threads = at::get_num_threads();
      at::set_num_threads(1);
      at::Tensor one = fp32_linear(x, w, bias, backend);
      at::set_num_threads(2);
      at::Tensor two = fp32_linear(x, w, bias, backend);
      at::set_num_threads(threads);
      EXPECT_TRUE(close_to_float64(two, x, w, bias)) << to_string(backend) << " bias " << with_bias;
      EXPECT_TRUE(test::tensors_equal(one, two)) << to_string(backend) << ": 1 and 2 threads differ";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp32GemmShapes,
                         ::testing::Values(Shape{1, 64, 64}, Shape{7, 576, 1536}, Shape{37, 64, 200}, Shape{512, 576, 576},
                                           Shape{512, 576, 192}, Shape{512, 1536, 576}, Shape{128, 576, 49152},
                                           Shape{1024, 768, 2304}, Shape{1024, 3072, 768}, Shape{3, 4096, 8}));

TEST(Fp32Gemm, BatchedProductsWithTransposedOperandsAreCloseToFloat64AndIndependentOfBatchAndThreads) {
  at::manual_seed(5);
  // The attention shapes: q kᵀ (k read transposed in place) scaled, and probabilities times v.
  for (const auto& [batch, L, hd] : {std::array<std::int64_t, 3>{9, 512, 64}, {2, 37, 16}, {1, 5, 8}}) {
    at::Tensor q = at::randn({batch, L, hd}), k = at::randn({batch, L, hd}), v = at::randn({batch, L, hd});
    const double alpha = 1.0 / std::sqrt(static_cast<double>(hd));
    const int threads = at::get_num_threads();
    at::set_num_threads(1);
    at::Tensor one = fp32_bmm(q, k.transpose(1, 2), alpha);
    at::set_num_threads(2);
    at::Tensor scores = fp32_bmm(q, k.transpose(1, 2), alpha);
    at::set_num_threads(threads);
    EXPECT_TRUE(test::tensors_equal(one, scores)) << "1 and 2 threads differ";
    at::Tensor exact = at::bmm(q.to(at::kDouble), k.to(at::kDouble).transpose(1, 2)) * alpha;
    at::Tensor bound = 1e-6 * at::bmm(q.to(at::kDouble).abs(), k.to(at::kDouble).abs().transpose(1, 2)) * alpha + 1e-30;
    EXPECT_LE(((scores.to(at::kDouble) - exact).abs() / bound).max().item<double>(), 1.0);
    at::Tensor probs = at::softmax(scores, -1);
    at::Tensor out = fp32_bmm(probs, v);
    EXPECT_TRUE(test::tensors_close(out, at::bmm(probs.to(at::kDouble), v.to(at::kDouble)).to(at::kFloat), 1e-5, 1e-5));
    // An entry computed alone equals the same entry in the batch.
    at::Tensor last_alone = fp32_bmm(q.narrow(0, batch - 1, 1), k.narrow(0, batch - 1, 1).transpose(1, 2), alpha);
    EXPECT_TRUE(test::tensors_equal(last_alone[0], scores[batch - 1]));
  }
}

// The evaluator's policy (kernels/compute_threads.h): OpenBLAS on one thread, BLAS calls cut into
// pieces over LibTorch's pool. 1, 2 and 3 threads must give the same bits, for the linears (model
// shapes, the LM head's 49,152 columns, N not a multiple of 8) and the attention products.
TEST(Fp32Gemm, InferenceThreadingGivesTheSameBitsForEveryThreadCount) {
  const int before = at::get_num_threads();
  const std::optional<int> blas_before = blas_threads();
  at::manual_seed(17);
  const std::vector<Shape> shapes = {{512, 576, 576}, {512, 576, 192}, {512, 1536, 576}, {16, 576, 49152},
                                     {33, 70, 13},    {1, 8, 3},       {3, 4096, 8}};
  for (const Shape& s : shapes) {
    at::Tensor x = at::randn({s.M, s.K}), w = at::randn({s.N, s.K}) / 8, b = at::randn({s.N});
    std::vector<at::Tensor> got;
    for (int threads : {1, 2, 3}) {
      set_inference_threads(threads);
      if (blas_before) {
        EXPECT_EQ(blas_threads(), 1);
      }
      got.push_back(fp32_linear(x, w, b));
    }
    set_compute_threads(before);
    EXPECT_TRUE(close_to_float64(got[0], x, w, b)) << s.M << "x" << s.K << "x" << s.N;
    EXPECT_TRUE(test::tensors_equal(got[0], got[1])) << "1 and 2 threads differ, " << s.M << "x" << s.K << "x" << s.N;
    EXPECT_TRUE(test::tensors_equal(got[0], got[2])) << "1 and 3 threads differ, " << s.M << "x" << s.K << "x" << s.N;
  }
  at::Tensor q = at::randn({9, 512, 64}), k = at::randn({9, 512, 64});
  std::vector<at::Tensor> scores;
  for (int threads : {1, 2, 3}) {
    set_inference_threads(threads);
    scores.push_back(fp32_bmm(q, k.transpose(1, 2), 0.125));
  }
  set_compute_threads(before);
  EXPECT_TRUE(test::tensors_equal(scores[0], scores[1]));
  EXPECT_TRUE(test::tensors_equal(scores[0], scores[2]));
  EXPECT_TRUE(test::tensors_close(scores[0], at::bmm(q, k.transpose(1, 2)) * 0.125, 1e-5, 1e-5));
  EXPECT_FALSE(inference_threading());  // set_compute_threads restored the training policy
}

TEST(Fp32Gemm, FallsBackToLibTorchForWhatOnednnDoesNotTake) {
  at::Tensor x = at::randn({5, 16}), w = at::randn({8, 16});
  // Non-contiguous input and double precision take at::linear, with the same result.
  at::Tensor xt = at::randn({16, 5}).t();
  EXPECT_TRUE(test::tensors_equal(fp32_linear(xt, w, at::Tensor()), at::linear(xt, w)));
  at::Tensor xd = x.to(at::kDouble), wd = w.to(at::kDouble);
  EXPECT_TRUE(test::tensors_equal(fp32_linear(xd, wd, at::Tensor()), at::linear(xd, wd)));
  EXPECT_FALSE(fp32_gemm_description().empty());
}

}  // namespace
}  // namespace qeval::kernels
