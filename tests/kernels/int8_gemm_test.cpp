// int8 GEMM backends against exact products computed in int64 by ATen (bit for bit, after the
// one rounding to float32 the header states), and the scaled result against a double-precision
// evaluation of the header's formula.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "kernels/cpu/int8_gemm_cpu.h"
#include "kernels/int8_gemm.h"
#include "tests/support/test_data.h"

namespace qeval::kernels {
namespace {

at::Tensor random_int8(std::int64_t rows, std::int64_t cols, int lo = -127, int hi = 128) {
  return at::randint(lo, hi, {rows, cols}, at::TensorOptions().dtype(at::kChar));
}

// Σ_k a[m,k] b[n,k] in int64 through ATen, independent of every backend under test: [M, N] int64.
at::Tensor exact_products(const at::Tensor& a, const at::Tensor& b) {
  return at::matmul(a.to(at::kLong), b.to(at::kLong).t());
}

struct Shape {
  std::int64_t M, K, N;
};

class Int8GemmShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(Int8GemmShapes, IntegerBackendsEqualExactProducts) {
  const Shape s = GetParam();
  at::manual_seed(s.M * 1000003 + s.K * 101 + s.N);
  at::Tensor a = random_int8(s.M, s.K), b = random_int8(s.N, s.K);
  at::Tensor expected = exact_products(a, b);
  // These sums stay below 2^24 in magnitude, so float32 holds them exactly.
  ASSERT_LT(expected.abs().max().item<std::int64_t>(), std::int64_t{1} << 24);
  expected = expected.to(at::kFloat);
  EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::reference), expected));
  EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::float_exact), expected));
  EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b), expected)) << "automatic";
  if (cpu::avx2_int8_gemm_available()) {
    EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::avx2), expected)) << "avx2";
  }
  if (!cpu::onednn_int8_exact())
    GTEST_SKIP() << "oneDNN's int8 matmul is not exact on this CPU (no VNNI): dispatch uses "
                 << to_string(int8_gemm_cpu_backend()) << " (checked above)";
  EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::onednn), expected))
      << "oneDNN implementation " << cpu::onednn_int8_impl(s.M, s.K, s.N);
}

// M = 1 (one token), K not a multiple of 4 or 16, odd N, and a layer-sized case.
INSTANTIATE_TEST_SUITE_P(Shapes, Int8GemmShapes,
                         ::testing::Values(Shape{1, 64, 64}, Shape{1, 67, 33}, Shape{3, 5, 7}, Shape{7, 13, 1},
                                           Shape{16, 30, 17}, Shape{17, 129, 31}, Shape{64, 255, 129},
                                           Shape{130, 768, 96}, Shape{5, 1001, 513}, Shape{2, 1, 3},
                                           Shape{3, 33, 17}, Shape{17, 31, 3}, Shape{1, 1, 1}, Shape{4, 576, 16},
                                           Shape{33, 35, 47}),
                         [](const auto& info) {
                           return "M" + std::to_string(info.param.M) + "_K" + std::to_string(info.param.K) + "_N" +
                                  std::to_string(info.param.N);
                         });

TEST(Int8Gemm, LargeSumsAreExactBeforeTheOneRoundingToFloat) {
  // ±127·±127 over a long K, plus an odd offset so the sums are not multiples of a power of two:
  // beyond 2^24 the backends must still agree with round-to-nearest of the exact int64 sum.
  const std::int64_t K = 4099;
  at::Tensor a = at::full({2, K}, 127, at::TensorOptions().dtype(at::kChar));
  a[1].fill_(-127);
  a[0][0] = 1;
  at::Tensor b = at::full({3, K}, -127, at::TensorOptions().dtype(at::kChar));
  b[2][5] = 3;
  at::Tensor exact = exact_products(a, b);
  EXPECT_EQ(exact[1][1].item<std::int64_t>(), 127LL * 127 * K);
  EXPECT_GT(exact.abs().max().item<std::int64_t>(), std::int64_t{1} << 25);
  at::Tensor expected = exact.to(at::kFloat);  // int64 -> float32 rounds to nearest, once
  EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::reference), expected));
  EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::float_exact), expected));
  EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b), expected)) << "automatic";
  if (cpu::avx2_int8_gemm_available()) {
    EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::avx2), expected)) << "avx2";
  }
  // The dispatch's self-test must agree with what oneDNN computes here: exact, or not used.
  if (cpu::onednn_int8_jit())
    EXPECT_EQ(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::onednn), expected), cpu::onednn_int8_exact())
        << "oneDNN implementation " << cpu::onednn_int8_impl(2, K, 3);
}

TEST(Int8Gemm, FloatExactIsExactOnBothSidesOfTheFloat32Bound) {
  // float_exact sums in float32 up to K = 1024, where the largest possible sum, (-128)·(-128)·1024,
  // is 2^24, the last integer of a run float32 holds without gaps; beyond, in float64. Each K here
  // has a row pair at that extreme, a row pair of 127 · 127 products with one odd term, whose
  // partial sums pass 2^24 for K > 1040 (float32 summing them in sequence would round them), and
  // random rows.
  for (std::int64_t K : {1023, 1024, 1025, 1500}) {
    at::manual_seed(K);
    at::Tensor a = random_int8(4, K, -128, 128), b = random_int8(4, K, -128, 128);
    a[0].fill_(-128);
    b[0].fill_(-128);
    a[1].fill_(127);
    b[1].fill_(127);
    a[1][0] = 1;
    at::Tensor exact = exact_products(a, b);
    EXPECT_EQ(exact[0][0].item<std::int64_t>(), 128LL * 128 * K);
    at::Tensor expected = exact.to(at::kFloat);
    EXPECT_TRUE(test::tensors_equal(cpu::int8_matmul_acc_float(a, b), expected)) << "K " << K;
    EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::reference), expected)) << "K " << K;
  }
}

// The AVX2 kernel's worst cases: every code ±127 and −128 (the largest int16 pair sums vpmaddwd
// forms, 2 · 128² = 32,768, and the most negative), −127 against +127, the same values on shapes
// that leave tails in M (rows % 6), N (columns % 16, % 64) and K (odd, % 32), shapes of several
// tiles in both directions, and random codes, for 1 and 2 threads: bit for bit against the reference.
class Int8GemmAvx2 : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!cpu::avx2_int8_gemm_available()) GTEST_SKIP() << "no AVX2 on this CPU";
    previous_ = at::get_num_threads();
    at::set_num_threads(GetParam());
  }
  void TearDown() override {
    if (previous_ > 0) at::set_num_threads(previous_);
  }
  int previous_ = 0;
};

TEST_P(Int8GemmAvx2, ExtremeCodesOnOddShapesEqualTheReference) {
  const std::vector<Shape> shapes = {{1, 1, 1},   {1, 3, 17},   {3, 4, 16},    {17, 5, 1},    {5, 31, 33},
                                     {4, 32, 16}, {7, 33, 15},  {16, 127, 18}, {9, 576, 31},  {2, 1537, 3},
                                     {33, 4099, 19}, {130, 1001, 200}, {13, 40001, 20}};
  for (const Shape& s : shapes) {
    at::manual_seed(s.M * 7 + s.K * 131 + s.N);
    at::Tensor pos_a = at::full({s.M, s.K}, 127, at::TensorOptions().dtype(at::kChar));
    at::Tensor pos_b = at::full({s.N, s.K}, 127, at::TensorOptions().dtype(at::kChar));
    // Random signs on ±127: pair sums of +32,258, −32,258 and 0 all occur.
    at::Tensor sign_a = at::randint(0, 2, {s.M, s.K}, at::TensorOptions().dtype(at::kChar)) * 2 - 1;
    at::Tensor sign_b = at::randint(0, 2, {s.N, s.K}, at::TensorOptions().dtype(at::kChar)) * 2 - 1;
    const at::Tensor low_a = at::full({s.M, s.K}, -128, at::TensorOptions().dtype(at::kChar));
    const at::Tensor low_b = at::full({s.N, s.K}, -128, at::TensorOptions().dtype(at::kChar));
    const std::vector<std::pair<at::Tensor, at::Tensor>> cases = {
        {pos_a, pos_b}, {-pos_a, pos_b}, {pos_a, -pos_b}, {-pos_a, -pos_b},
        {pos_a * sign_a, pos_b * sign_b}, {low_a, low_b}, {low_a, pos_b}, {random_int8(s.M, s.K), random_int8(s.N, s.K)}};
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const at::Tensor& a = cases[c].first;
      const at::Tensor& b = cases[c].second;
      at::Tensor expected = exact_products(a, b).to(at::kFloat);
      EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::avx2), expected))
          << "case " << c << ", M " << s.M << " K " << s.K << " N " << s.N << ", threads " << GetParam();
      EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::reference), expected));
    }
  }
}

TEST_P(Int8GemmAvx2, MinusOneTwentyEightIsStillExact) {
  // −128 is outside the symmetric codes the quantisers produce; the int16 products take it like
  // any other code.
  at::manual_seed(3);
  at::Tensor a = random_int8(6, 70, -128, 128), b = random_int8(19, 70, -128, 128);
  a[2].fill_(-128);
  b[4].fill_(-128);
  at::Tensor expected = exact_products(a, b).to(at::kFloat);
  EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a, b, Int8GemmBackend::avx2), expected));
  at::Tensor a2 = random_int8(6, 70);
  at::Tensor b2 = random_int8(19, 70);
  b2[18][69] = -128;  // the very last byte: the scan reaches the tail
  EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(a2, b2, Int8GemmBackend::avx2), exact_products(a2, b2).to(at::kFloat)));
}

TEST_P(Int8GemmAvx2, ScaledResultEqualsTheReferenceBackend) {
  at::manual_seed(11);
  const std::int64_t M = 37, K = 200, N = 45;
  at::Tensor a = random_int8(M, K), b = random_int8(N, K);
  at::Tensor sa = at::rand({M}) + 0.01, sb = at::rand({N}) + 0.01, bias = at::randn({N});
  EXPECT_TRUE(test::tensors_equal(int8_gemm(a, b, sa, sb, bias, Int8GemmBackend::avx2),
                                  int8_gemm(a, b, sa, sb, bias, Int8GemmBackend::reference)));
  // Non-contiguous operands are made contiguous by the dispatch.
  at::Tensor at_ = random_int8(K, M).t();
  EXPECT_TRUE(test::tensors_equal(int8_matmul_acc(at_, b, Int8GemmBackend::avx2), exact_products(at_, b).to(at::kFloat)));
}

INSTANTIATE_TEST_SUITE_P(Threads, Int8GemmAvx2, ::testing::Values(1, 2),
                         [](const auto& info) { return "threads" + std::to_string(info.param); });

TEST(Int8Gemm, ScalesAndBiasFollowTheHeaderFormula) {
  at::manual_seed(7);
  const std::int64_t M = 9, K = 45, N = 11;
  at::Tensor a = random_int8(M, K), b = random_int8(N, K);
  at::Tensor bias = at::randn({N});
  for (bool per_row : {true, false}) {
    for (bool per_col : {true, false}) {
      at::Tensor sa = per_row ? at::rand({M}) + 0.01 : at::full({1}, 0.37f);
      at::Tensor sb = per_col ? at::rand({N}) + 0.01 : at::full({1}, 0.011f);
      at::Tensor expected = exact_products(a, b).to(at::kDouble) * sa.to(at::kDouble).reshape({-1, 1}) *
                                sb.to(at::kDouble).reshape({1, -1}) +
                            bias.to(at::kDouble);
      for (auto backend : {Int8GemmBackend::reference, Int8GemmBackend::float_exact, Int8GemmBackend::onednn,
                           Int8GemmBackend::avx2, Int8GemmBackend::automatic}) {
        if (backend == Int8GemmBackend::onednn && !cpu::onednn_int8_exact()) continue;
        if (backend == Int8GemmBackend::avx2 && !cpu::avx2_int8_gemm_available()) continue;
        at::Tensor got = int8_gemm(a, b, sa, sb, bias, backend);
        // Two float multiplies and an add after an exact sum: a few float32 ulps.
        EXPECT_TRUE(test::tensors_close(got, expected, 1e-6, 1e-6)) << to_string(backend);
      }
      // Integer backends apply the scales identically: bit-equal floats.
      EXPECT_TRUE(test::tensors_equal(int8_gemm(a, b, sa, sb, bias, Int8GemmBackend::float_exact),
                                      int8_gemm(a, b, sa, sb, bias, Int8GemmBackend::reference)));
      if (cpu::onednn_int8_exact())
        EXPECT_TRUE(test::tensors_equal(int8_gemm(a, b, sa, sb, bias, Int8GemmBackend::onednn),
                                        int8_gemm(a, b, sa, sb, bias, Int8GemmBackend::reference)));
      if (cpu::avx2_int8_gemm_available()) {
        // The AVX2 backend applies the scales in its own store loop: still the same bits, with and
        // without bias, and through its −128 fallback.
        EXPECT_TRUE(test::tensors_equal(int8_gemm(a, b, sa, sb, bias, Int8GemmBackend::avx2),
                                        int8_gemm(a, b, sa, sb, bias, Int8GemmBackend::reference)));
        EXPECT_TRUE(test::tensors_equal(int8_gemm(a, b, sa, sb, at::Tensor(), Int8GemmBackend::avx2),
                                        int8_gemm(a, b, sa, sb, at::Tensor(), Int8GemmBackend::reference)));
        at::Tensor a128 = a.clone();
        a128[0][0] = -128;
        EXPECT_TRUE(test::tensors_equal(int8_gemm(a128, b, sa, sb, bias, Int8GemmBackend::avx2),
                                        int8_gemm(a128, b, sa, sb, bias, Int8GemmBackend::reference)));
      }
      // The fallback sums in float: equal to float rounding (K = 45 terms).
      EXPECT_TRUE(test::tensors_close(int8_gemm(a, b, sa, sb, bias, Int8GemmBackend::dequantize_fallback), expected,
                                      1e-5 * expected.abs().max().item<double>(), 1e-5));
    }
  }
  EXPECT_TRUE(test::tensors_equal(int8_gemm(a, b, at::ones({M}), at::ones({N})),
                                  exact_products(a, b).to(at::kFloat)));
  EXPECT_TRUE(test::tensors_equal(int8_gemm(a, b, at::full({1}, 2.0f), at::full({1}, 0.5f)),
                                  exact_products(a, b).to(at::kFloat)));
}

TEST(Int8Gemm, AutomaticDispatchPicksAnExactIntegerBackendAndTheFallbackIsAvailable) {
  at::Tensor a = random_int8(4, 8), b = random_int8(5, 8);
  const Int8GemmBackend expected = cpu::onednn_int8_exact()          ? Int8GemmBackend::onednn
                                   : cpu::avx2_int8_gemm_available() ? Int8GemmBackend::avx2
                                                                     : Int8GemmBackend::float_exact;
  EXPECT_EQ(int8_gemm_backend_for(a, b), expected);
  EXPECT_EQ(parse_int8_gemm_backend("avx2"), Int8GemmBackend::avx2);
  EXPECT_EQ(parse_int8_gemm_backend("float_exact"), Int8GemmBackend::float_exact);
  EXPECT_THROW(int8_matmul_acc(a, b, Int8GemmBackend::dequantize_fallback), c10::Error);
  EXPECT_EQ(parse_int8_gemm_backend("dequantize_fallback"), Int8GemmBackend::dequantize_fallback);
  try {
    parse_int8_gemm_backend("mkl");
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("automatic, reference, onednn, avx2, float_exact, dequantize_fallback"), std::string::npos)
        << e.what();
  }
}

TEST(Int8Gemm, RejectsMismatchedOperandsWithTheShapes) {
  at::Tensor a = random_int8(4, 8), b = random_int8(5, 9);
  try {
    int8_matmul_acc(a, b);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("K mismatch, a has 8, b has 9"), std::string::npos) << e.what();
  }
  EXPECT_THROW(int8_matmul_acc(a.to(at::kFloat), random_int8(5, 8)), c10::Error);
  EXPECT_THROW(int8_gemm(a, random_int8(5, 8), at::ones({3}), at::ones({5})), c10::Error);
  EXPECT_THROW(int8_gemm(a, random_int8(5, 8), at::ones({4}), at::ones({5}), at::ones({4})), c10::Error);
}

}  // namespace
}  // namespace qeval::kernels
