// The W4A16 kernels (kernels/cuda/w4a16_gemm.h) against a CPU reference written from DESIGN.md §5
// (Ŵ = (q − z) · s in float32, summed in double) within the fp16 tolerance, for both kernels, per
// channel and per group, zero points inside and far outside [0, 15]. Skipped, visibly, without a
// CUDA device; the host-side kernel choice is checked everywhere.
#include <gtest/gtest.h>

#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/w4a16_gemm.h"

namespace cu = qeval::kernels::cuda;

#define QEVAL_REQUIRE_CUDA_DEVICE()                                                  \
  do {                                                                               \
    if (cu::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cu::no_device_reason(); \
  } while (0)

namespace {

struct Case {
  std::int64_t m, n, k, group;
  cu::W4A16Kernel kernel;
};

std::string describe(const Case& c) {
  return "M " + std::to_string(c.m) + ", N " + std::to_string(c.n) + ", K " + std::to_string(c.k) + ", group " +
         std::to_string(c.group) + ", kernel " + cu::to_string(c.kernel);
}

void check_w4a16(const Case& c, std::uint32_t seed) {
  SCOPED_TRACE(describe(c));
  std::mt19937 rng(seed);
  const std::int64_t g = std::min(c.group, c.k), G = (c.k + g - 1) / g, row_bytes = (c.k + 1) / 2;
  std::uniform_int_distribution<int> nibble(0, 15), zero_in(0, 15), pick(0, 9);
  std::uniform_real_distribution<float> scale_d(1e-3f, 5e-2f), bias_d(-1.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 0.25f);  // far zero points make |Ŵ| ~ 150: keep y in fp16 range

  std::vector<int> q(static_cast<std::size_t>(c.n * c.k));
  for (auto& v : q) v = nibble(rng);
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(c.n * row_bytes), 0);
  for (std::int64_t n = 0; n < c.n; ++n)
    for (std::int64_t k = 0; k < c.k; ++k)
      packed[n * row_bytes + k / 2] |= static_cast<std::uint8_t>(q[n * c.k + k] << (k % 2 ? 4 : 0));
  if (c.k % 2)  // the padding nibble must be ignored: make it non-zero
    for (std::int64_t n = 0; n < c.n; ++n) packed[n * row_bytes + row_bytes - 1] |= 0xA0;
  std::vector<float> scales(static_cast<std::size_t>(c.n * G)), zeros(scales.size()), bias(c.n);
  for (auto& v : scales) v = scale_d(rng);
  const float far_zeros[] = {-20.0f, 40.0f, -3000.0f, 2500.0f};
  for (auto& v : zeros) v = pick(rng) < 8 ? static_cast<float>(zero_in(rng)) : far_zeros[pick(rng) % 4];
  for (auto& v : bias) v = bias_d(rng);
  std::vector<c10::Half> x(static_cast<std::size_t>(c.m * c.k));
  for (auto& v : x) v = c10::Half(normal(rng));

  cu::DeviceArray<c10::Half> dx(x), dy(static_cast<std::size_t>(c.m * c.n));
  cu::DeviceArray<std::uint8_t> dq(packed);
  cu::DeviceArray<float> ds(scales), dz(zeros), db(bias);
  for (bool with_bias : {false, true}) {
    cu::fill_bytes(dy.get(), 0xFF, dy.size() * 2);  // fp16 NaN: unwritten outputs fail
    cu::W4A16Args args;
    args.x = dx.get();
    args.qweight = dq.get();
    args.scales = ds.get();
    args.zeros = dz.get();
    args.bias = with_bias ? db.get() : nullptr;
    args.y = dy.get();
    args.m = c.m;
    args.n = c.n;
    args.k = c.k;
    args.group_size = c.group;
    cu::w4a16_gemm(args, c.kernel);
    cu::synchronize();
    const auto y = dy.to_host();
    for (std::int64_t m = 0; m < c.m; ++m)
      for (std::int64_t n = 0; n < c.n; ++n) {
        double ref = with_bias ? bias[n] : 0.0, mag = std::abs(ref);
        for (std::int64_t k = 0; k < c.k; ++k) {
          const float w = (static_cast<float>(q[n * c.k + k]) - zeros[n * G + k / g]) * scales[n * G + k / g];
          const double p = static_cast<double>(w) * static_cast<float>(x[m * c.k + k]);
          ref += p;
          mag += std::abs(p);
        }
        // fp32 accumulation and one fp16 rounding of the output: within 2⁻¹⁰ of Σ|terms|.
        const double got = static_cast<float>(y[m * c.n + n]);
        ASSERT_LE(std::abs(got - ref), std::ldexp(mag, -10))
            << "bias " << with_bias << ", at [" << m << ", " << n << "]: got " << got << ", expected " << ref
            << " (Σ|terms| " << mag << ")";
      }
  }
}

}  // namespace

TEST(CudaW4A16, KernelChoiceIsDecidedOnTheHost) {
  alignas(16) static std::uint8_t buffer[64];
  cu::W4A16Args a;
  a.x = buffer;
  a.qweight = buffer;
  a.m = 1, a.n = 16, a.k = 256, a.group_size = 128;
  EXPECT_EQ(cu::w4a16_tensor_core_unsupported_reason(a), "");
  a.group_size = 4096;  // per channel, however spelled
  EXPECT_EQ(cu::w4a16_tensor_core_unsupported_reason(a), "");
  a.group_size = 64;
  EXPECT_NE(cu::w4a16_tensor_core_unsupported_reason(a).find("group size"), std::string::npos);
  a.group_size = 128, a.k = 172;
  EXPECT_NE(cu::w4a16_tensor_core_unsupported_reason(a).find("K must be a multiple of 128"), std::string::npos);
  a.k = 256, a.x = buffer + 2;
  EXPECT_NE(cu::w4a16_tensor_core_unsupported_reason(a).find("16-byte aligned"), std::string::npos);
}

TEST(CudaW4A16, TensorCoreKernelWithinFp16Tolerance) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  const auto tc = cu::W4A16Kernel::tensor_core;
  std::uint32_t seed = 1;
  for (std::int64_t m : {1, 4, 8, 9, 16, 33})
    for (std::int64_t group : {std::int64_t{128}, std::int64_t{1} << 20}) {  // per group, per channel
      check_w4a16({m, 48, 384, group, tc}, seed++);
      check_w4a16({m, 40, 1152, group, tc}, seed++);  // N not a multiple of 16; K spread over all 8 warps
    }
  check_w4a16({16, 256, 4096, 128, tc}, seed++);
}

TEST(CudaW4A16, SimpleKernelWithinFp16Tolerance) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  const auto simple = cu::W4A16Kernel::simple;
  std::uint32_t seed = 100;
  for (std::int64_t m : {1, 4, 11})
    for (auto [k, group] : {std::pair<std::int64_t, std::int64_t>{64, 64}, {172, 172}, {172, 32}, {37, 5}, {384, 128}})
      check_w4a16({m, 21, k, group, simple}, seed++);
}

TEST(CudaW4A16, AutomaticFallsBackToTheSimpleKernel) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  check_w4a16({3, 20, 172, 172, cu::W4A16Kernel::automatic}, 300);   // stories260K's FFN width
  check_w4a16({3, 20, 256, 128, cu::W4A16Kernel::automatic}, 301);
}
