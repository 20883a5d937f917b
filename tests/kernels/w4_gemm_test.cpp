// 4-bit weight GEMM: the packed layout on hand-made cases, and every backend against
// dequantise + at::matmul. Tolerance: the K-sum is reordered (16 or 8 lanes, or BLAS blocking),
// so each output may differ by float32 rounding of the sum, held to
// |got − expected| ≤ 1e-5 · Σ_k |x[m, k]| · |Ŵ[n, k]| (relative to the size of the terms summed).
#include <gtest/gtest.h>

#include <tuple>

#include "kernels/cpu/w4_gemm_cpu.h"
#include "kernels/w4_gemm.h"
#include "tests/support/test_data.h"

namespace qeval::kernels {
namespace {

at::Tensor u8(std::vector<int> values, std::int64_t rows) {
  at::Tensor t = at::tensor(values, at::TensorOptions().dtype(at::kInt)).to(at::kByte);
  return t.reshape({rows, -1});
}

TEST(W4Layout, PacksLowNibbleEvenKAndPadsOddK) {
  // K = 3: byte 0 holds k0 (low) and k1 (high); byte 1 holds k2 (low) and a zero pad (high).
  at::Tensor codes = u8({1, 2, 3, 15, 0, 9}, 2);
  at::Tensor packed = pack_u4(codes);
  EXPECT_TRUE(test::tensors_equal(packed, u8({0x21, 0x03, 0x0F, 0x09}, 2)));
  EXPECT_TRUE(test::tensors_equal(unpack_u4(packed, 3), codes));
  // Even K: no padding.
  at::Tensor even = u8({7, 8, 0, 15}, 1);
  EXPECT_TRUE(test::tensors_equal(pack_u4(even), u8({0x87, 0xF0}, 1)));
  EXPECT_TRUE(test::tensors_equal(unpack_u4(pack_u4(even), 4), even));
  // A non-zero padding nibble, a code out of range and a wrong byte count are refused.
  EXPECT_THROW(unpack_u4(u8({0x21, 0x13}, 1), 3), c10::Error);
  EXPECT_THROW(pack_u4(u8({16}, 1)), c10::Error);
  EXPECT_THROW(unpack_u4(packed, 5), c10::Error);
}

TEST(W4Layout, RandomCodesRoundTripForOddAndEvenK) {
  at::manual_seed(3);
  for (std::int64_t K : {1, 2, 7, 64, 129}) {
    at::Tensor codes = at::randint(0, 16, {5, K}, at::TensorOptions().dtype(at::kByte));
    at::Tensor packed = pack_u4(codes);
    ASSERT_EQ(packed.size(1), (K + 1) / 2);
    EXPECT_TRUE(test::tensors_equal(unpack_u4(packed, K), codes)) << "K = " << K;
  }
}

TEST(W4Layout, DequantizesGroupsByHand) {
  // One row, K = 5, groups of 2 → G = 3: (q − z) · s per group.
  at::Tensor packed = pack_u4(u8({0, 15, 3, 4, 12}, 1));
  at::Tensor scales = at::tensor({0.5f, 2.0f, 0.25f}).reshape({1, 3});
  at::Tensor zeros = at::tensor({1.0f, -2.0f, 16.0f}).reshape({1, 3});
  at::Tensor expected = at::tensor({-0.5f, 7.0f, 10.0f, 12.0f, -1.0f}).reshape({1, 5});
  EXPECT_TRUE(test::tensors_equal(w4_dequantize(packed, scales, zeros, 5, 2), expected));
  EXPECT_THROW(w4_dequantize(packed, scales, zeros, 5, 3), c10::Error);  // G would be 2
}

TEST(W4Layout, VectorizedDequantizeEqualsTheAtenCompositionBitForBit) {
  at::manual_seed(4);
  for (auto [N, K, g] : std::vector<std::tuple<int, int, int>>{{5, 1, 1}, {3, 33, 7}, {9, 255, 255}, {4, 300, 128},
                                                               {17, 4096, 128}, {2, 97, 32}}) {
    const std::int64_t G = (K + g - 1) / g;
    at::Tensor qweight = pack_u4(at::randint(0, 16, {N, K}, at::TensorOptions().dtype(at::kByte)));
    at::Tensor scales = at::rand({N, G}) + 0.01, zeros = at::randint(-4, 20, {N, G}).to(at::kFloat);
    at::Tensor expected = cpu::w4_dequantize_reference(qweight, scales, zeros, K, g);
    EXPECT_TRUE(test::tensors_equal(w4_dequantize(qweight, scales, zeros, K, g), expected)) << N << "x" << K << " g" << g;
    EXPECT_TRUE(test::tensors_equal(cpu::w4_dequantize_vectorized(qweight, scales, zeros, K, g, false), expected))
        << "portable " << N << "x" << K << " g" << g;
  }
}

struct Case {
  std::int64_t M, K, N, group;
};

class W4GemmCases : public ::testing::TestWithParam<Case> {};

::testing::AssertionResult close_to_matmul(const at::Tensor& got, const at::Tensor& x, const at::Tensor& w,
                                           const at::Tensor& bias) {
  at::Tensor expected = at::matmul(x, w.t()) + bias;
  at::Tensor bound = 1e-5 * at::matmul(x.abs().to(at::kDouble), w.abs().to(at::kDouble).t());  // [M, N]
  at::Tensor err = (got.to(at::kDouble) - expected.to(at::kDouble)).abs();
  at::Tensor excess = (err - bound).reshape({-1});
  std::int64_t worst = excess.argmax().item<std::int64_t>();
  if (excess[worst].item<double>() <= 0 && !got.isnan().any().item<bool>()) return ::testing::AssertionSuccess();
  const std::int64_t N = got.size(1);
  return ::testing::AssertionFailure() << "worst at [" << worst / N << ", " << worst % N << "]: got "
                                       << got.reshape({-1})[worst].item<float>() << ", expected "
                                       << expected.reshape({-1})[worst].item<float>() << ", |error| "
                                       << err.reshape({-1})[worst].item<double>() << " > bound "
                                       << bound.reshape({-1})[worst].item<double>();
}

TEST_P(W4GemmCases, EveryBackendEqualsDequantizeThenMatmul) {
  const Case c = GetParam();
  at::manual_seed(c.M * 7919 + c.K * 31 + c.N + c.group);
  const std::int64_t G = (c.K + c.group - 1) / c.group;
  at::Tensor codes = at::randint(0, 16, {c.N, c.K}, at::TensorOptions().dtype(at::kByte));
  at::Tensor qweight = pack_u4(codes);
  at::Tensor scales = at::rand({c.N, G}) * 0.1 + 1e-3;
  at::Tensor zeros = at::randint(-3, 19, {c.N, G}).to(at::kFloat);  // outside [0, 15] too
  at::Tensor x = at::randn({c.M, c.K});
  at::Tensor bias = at::randn({c.N});
  at::Tensor w = w4_dequantize(qweight, scales, zeros, c.K, c.group);  // [N, K]
  for (auto backend : {W4GemmBackend::reference, W4GemmBackend::vectorized, W4GemmBackend::dequantize_fallback,
                       W4GemmBackend::automatic})
    EXPECT_TRUE(close_to_matmul(w4_gemm(x, qweight, scales, zeros, c.group, bias, backend), x, w, bias))
        << to_string(backend);
  // The portable loop, whichever variant this CPU would pick.
  EXPECT_TRUE(close_to_matmul(cpu::w4_gemm_vectorized(x, qweight, scales, zeros, c.group, bias, false), x, w, bias))
      << "portable variant";
  EXPECT_TRUE(close_to_matmul(w4_gemm(x, qweight, scales, zeros, c.group), x, w, at::zeros({c.N})))
      << "without bias";
}

// Per channel (group = K) and groups of 128, odd K, K not a multiple of 16 or of the group,
// M = 1 (decoding), N not a multiple of the 4-channel tile. M ≤ 4 with one group per row or
// groups a multiple of 32 take the AVX-512 kernel's register-only path (with a scalar tail for
// K mod 32); the other cases its buffered path.
INSTANTIATE_TEST_SUITE_P(Shapes, W4GemmCases,
                         ::testing::Values(Case{1, 768, 96, 768}, Case{1, 768, 97, 128}, Case{3, 255, 10, 255},
                                           Case{16, 257, 33, 128}, Case{5, 1001, 7, 128}, Case{17, 300, 65, 300},
                                           Case{2, 33, 5, 7}, Case{1, 1, 3, 1}, Case{4, 4096, 12, 128},
                                           Case{33, 131, 9, 128}, Case{2, 200, 9, 64}, Case{4, 96, 4, 32}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return "M" + std::to_string(c.M) + "_K" + std::to_string(c.K) + "_N" + std::to_string(c.N) +
                                  "_g" + std::to_string(c.group);
                         });

TEST(W4Gemm, DispatchUsesTheOnTheFlyKernelForSmallMAndFallsBackForLargeM) {
  EXPECT_EQ(w4_gemm_backend_for(1, 4096, 4096), W4GemmBackend::vectorized);
  EXPECT_EQ(w4_gemm_backend_for(16, 4096, 4096), W4GemmBackend::vectorized);
  EXPECT_EQ(w4_gemm_backend_for(512, 4096, 4096), W4GemmBackend::dequantize_fallback);
  EXPECT_EQ(parse_w4_gemm_backend("vectorized"), W4GemmBackend::vectorized);
  EXPECT_THROW(parse_w4_gemm_backend("avx"), c10::Error);
}

TEST(W4Gemm, RejectsInconsistentLayoutsNamingTheShapes) {
  at::Tensor qweight = at::zeros({4, 5}, at::TensorOptions().dtype(at::kByte));  // K = 9 or 10
  at::Tensor s = at::ones({4, 1}), z = at::zeros({4, 1});
  EXPECT_NO_THROW(w4_gemm(at::randn({2, 9}), qweight, s, z, 9));
  try {
    w4_gemm(at::randn({2, 12}), qweight, s, z, 12);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("qweight has 5 bytes per row, K = 12 needs 6"), std::string::npos) << e.what();
  }
  EXPECT_THROW(w4_gemm(at::randn({2, 10}), qweight, at::ones({4, 2}), z, 10), c10::Error);
  EXPECT_THROW(w4_gemm(at::randn({2, 10}), qweight, s, z, 11), c10::Error);
  EXPECT_THROW(w4_gemm(at::randn({2, 10}), qweight, s, z, 10, at::ones({3})), c10::Error);
}

}  // namespace
}  // namespace qeval::kernels
