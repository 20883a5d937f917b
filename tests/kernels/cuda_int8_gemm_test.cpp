// The cuBLASLt GEMMs (kernels/cuda/gemm_cublaslt.h) against plain CPU loops on random inputs:
// int8 s8 × s8 → s32 exactly, fp16 within the fp16 tolerance. Skipped, visibly, without a CUDA
// device; the host-side shape checks run everywhere the kernels are built.
#include <gtest/gtest.h>

#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm_cublaslt.h"

namespace cu = qeval::kernels::cuda;

#define QEVAL_REQUIRE_CUDA_DEVICE()                                                  \
  do {                                                                               \
    if (cu::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cu::no_device_reason(); \
  } while (0)

namespace {

std::vector<std::int8_t> random_int8(std::size_t n, std::mt19937& rng, int lo = -127, int hi = 127) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<std::int8_t> v(n);
  for (auto& x : v) x = static_cast<std::int8_t>(d(rng));
  return v;
}

// c[m, n] = Σ_k a[m, k] · b[n, k] in int64 (the reference cannot overflow).
std::vector<std::int64_t> reference_s32(const std::vector<std::int8_t>& a, const std::vector<std::int8_t>& b,
                                        std::int64_t M, std::int64_t N, std::int64_t K) {
  std::vector<std::int64_t> c(static_cast<std::size_t>(M * N));
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      std::int64_t s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += std::int64_t{a[m * K + k]} * b[n * K + k];
      c[m * N + n] = s;
    }
  return c;
}

::testing::AssertionResult equal_s32(const std::vector<std::int32_t>& got, const std::vector<std::int64_t>& exp,
                                     std::int64_t N) {
  std::size_t bad = 0, first = got.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != exp[i]) {
      if (bad++ == 0) first = i;
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " products differ; first at [" << first / N
                                       << ", " << first % N << "]: got " << got[first] << ", expected " << exp[first];
}

void check_int8_gemm(std::int64_t M, std::int64_t N, std::int64_t K, std::uint32_t seed, int lo = -127,
                     int hi = 127) {
  SCOPED_TRACE("M " + std::to_string(M) + ", N " + std::to_string(N) + ", K " + std::to_string(K));
  std::mt19937 rng(seed);
  const auto a = random_int8(static_cast<std::size_t>(M * K), rng, lo, hi);
  const auto b = random_int8(static_cast<std::size_t>(N * K), rng, lo, hi);
  cu::DeviceArray<std::int8_t> da(a), db(b);
  cu::DeviceArray<std::int32_t> dc(static_cast<std::size_t>(M * N));
  cu::fill_bytes(dc.get(), 0x5A, dc.size() * sizeof(std::int32_t));  // poison: every element must be written
  cu::int8_gemm_s32(da.get(), db.get(), dc.get(), M, N, K);
  cu::synchronize();
  EXPECT_TRUE(equal_s32(dc.to_host(), reference_s32(a, b, M, N, K), N));
}

}  // namespace

TEST(CudaInt8Gemm, ShapeLimitsAreCheckedOnTheHost) {
  EXPECT_EQ(cu::int8_gemm_unsupported_reason(8, 16, 64), "");
  EXPECT_NE(cu::int8_gemm_unsupported_reason(8, 16, 62).find("K a multiple of 4"), std::string::npos);
  EXPECT_NE(cu::int8_gemm_unsupported_reason(8, 18, 64).find("N (the output's leading dimension)"),
            std::string::npos);
  EXPECT_NE(cu::int8_gemm_unsupported_reason(8, 16, 133144 + 4).find("overflow"), std::string::npos);
  EXPECT_NE(cu::int8_gemm_unsupported_reason(0, 16, 64).find("positive"), std::string::npos);
}

TEST(CudaInt8Gemm, RefusesUnsupportedShapeBeforeTouchingTheDevice) {
  if (!cu::kernels_built()) GTEST_SKIP() << "built without CUDA kernels";
  // Pointers are never dereferenced: the shape check comes first.
  std::int8_t a[4] = {}, b[4] = {};
  std::int32_t c[4] = {};
  try {
    cu::int8_gemm_s32(a, b, c, 1, 1, 3);
    FAIL() << "expected CudaError";
  } catch (const cu::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("K a multiple of 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("int8_gemm_cublaslt.cu"), std::string::npos) << e.what();
  }
}

TEST(CudaDevice, WithoutADeviceCallsThrowInsteadOfCrashing) {
  if (cu::device_count() > 0) GTEST_SKIP() << "a CUDA device is present: " << cu::device_description(0);
  EXPECT_FALSE(cu::no_device_reason().empty());
  EXPECT_THROW(cu::malloc_device(16), cu::CudaError);
}

TEST(CudaInt8Gemm, ExactAgainstCpuOnRandomInputs) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  check_int8_gemm(1, 4, 4, 1);
  check_int8_gemm(7, 12, 20, 2);
  check_int8_gemm(64, 256, 768, 3);
  check_int8_gemm(129, 2304, 768, 4);   // GPT-2 c_attn, odd token count
  check_int8_gemm(33, 96, 4096, 5);
  check_int8_gemm(16, 172, 64, 6);      // stories260K-sized
}

TEST(CudaInt8Gemm, ExactAtTheInt8Extremes) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  check_int8_gemm(9, 8, 8192, 7, 127, 127);     // 127² · 8192 ≈ 1.3e8, all positive
  check_int8_gemm(9, 8, 8192, 8, -127, -127);
  check_int8_gemm(5, 12, 1024, 9, -128, 127);   // -128 is a valid int8 even if the quantiser never writes it
}

TEST(CudaInt8Gemm, AcceptsFourByteAlignedSubBuffers) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  // Offsets of 4 bytes: cuBLASLt must be told (its heuristic assumes 256-byte alignment).
  const std::int64_t M = 5, N = 8, K = 36;
  std::mt19937 rng(10);
  const auto a = random_int8(static_cast<std::size_t>(M * K + 4), rng);
  const auto b = random_int8(static_cast<std::size_t>(N * K + 4), rng);
  cu::DeviceArray<std::int8_t> da(a), db(b);
  cu::DeviceArray<std::int32_t> dc(static_cast<std::size_t>(M * N + 1));
  cu::int8_gemm_s32(da.get() + 4, db.get() + 4, dc.get() + 1, M, N, K);
  cu::synchronize();
  const std::vector<std::int8_t> a_view(a.begin() + 4, a.end()), b_view(b.begin() + 4, b.end());
  std::vector<std::int32_t> got = dc.to_host();
  got.erase(got.begin());
  EXPECT_TRUE(equal_s32(got, reference_s32(a_view, b_view, M, N, K), N));
}

TEST(CudaInt8Gemm, PlansAreCachedPerShape) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  const std::int64_t M = 24, N = 40, K = 52;
  cu::DeviceArray<std::int8_t> a(static_cast<std::size_t>(M * K)), b(static_cast<std::size_t>(N * K));
  cu::DeviceArray<std::int32_t> c(static_cast<std::size_t>(M * N));
  cu::fill_bytes(a.get(), 1, a.size());
  cu::fill_bytes(b.get(), 1, b.size());
  cu::int8_gemm_s32(a.get(), b.get(), c.get(), M, N, K);
  const std::size_t after_first = cu::cublaslt_plans_cached();
  for (int i = 0; i < 3; ++i) cu::int8_gemm_s32(a.get(), b.get(), c.get(), M, N, K);
  EXPECT_EQ(cu::cublaslt_plans_cached(), after_first) << "a repeated shape built a new plan";
  cu::int8_gemm_s32(a.get(), b.get(), c.get(), M - 1, N, K);
  EXPECT_EQ(cu::cublaslt_plans_cached(), after_first + 1);
  cu::synchronize();
  for (std::int32_t v : c.to_host()) ASSERT_EQ(v, K);  // all-ones operands: every product is K
}

TEST(CudaFp16Gemm, WithinFp16ToleranceOfDoubleReference) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  for (auto [M, N, K] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 64, 128}, {17, 96, 768},
                         {128, 256, 1024}}) {
    SCOPED_TRACE("M " + std::to_string(M) + ", N " + std::to_string(N) + ", K " + std::to_string(K));
    std::mt19937 rng(static_cast<std::uint32_t>(M * 31 + N));
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<c10::Half> x(static_cast<std::size_t>(M * K)), w(static_cast<std::size_t>(N * K));
    for (auto& v : x) v = c10::Half(d(rng));
    for (auto& v : w) v = c10::Half(d(rng));
    cu::DeviceArray<c10::Half> dx(x), dw(w), dy(static_cast<std::size_t>(M * N));
    cu::fill_bytes(dy.get(), 0xFF, dy.size() * 2);  // fp16 NaN: unwritten outputs fail
    cu::fp16_gemm(dx.get(), dw.get(), dy.get(), M, N, K);
    cu::synchronize();
    const auto y = dy.to_host();
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t n = 0; n < N; ++n) {
        double ref = 0, mag = 0;
        for (std::int64_t k = 0; k < K; ++k) {
          const double p = static_cast<double>(static_cast<float>(x[m * K + k])) * static_cast<float>(w[n * K + k]);
          ref += p;
          mag += std::abs(p);
        }
        // fp32 accumulation plus one fp16 rounding of the result: within 2⁻¹⁰ of Σ|terms|.
        const double got = static_cast<float>(y[m * N + n]);
        ASSERT_LE(std::abs(got - ref), std::ldexp(mag, -10) + 1e-6)
            << "at [" << m << ", " << n << "]: got " << got << ", expected " << ref;
      }
  }
}
