// The fused absmax quantiser (kernels/cuda/absmax_quantize.h) and the dequantising epilogue
// (kernels/cuda/int8_epilogue.h) against plain CPU loops written from DESIGN.md §5 and the order
// stated in kernels/int8_gemm.h; both must match exactly, bit for bit. Skipped, visibly, without
// a CUDA device.
#include <gtest/gtest.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/absmax_quantize.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/int8_epilogue.h"

namespace cu = qeval::kernels::cuda;

#define QEVAL_REQUIRE_CUDA_DEVICE()                                                  \
  do {                                                                               \
    if (cu::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cu::no_device_reason(); \
  } while (0)

namespace {

// v rounded to `type` (nearest even, as c10's conversions do) and widened back.
float round_to(cu::FloatType type, float v) {
  switch (type) {
    case cu::FloatType::f16: return static_cast<float>(c10::Half(v));
    case cu::FloatType::bf16: return static_cast<float>(c10::BFloat16(v));
    case cu::FloatType::f32: break;
  }
  return v;
}

// Element i of a device buffer of `type`, read back to the host, as float.
float element(const std::vector<std::uint8_t>& raw, std::size_t i, cu::FloatType type) {
  switch (type) {
    case cu::FloatType::f16: {
      c10::Half h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      return static_cast<float>(h);
    }
    case cu::FloatType::bf16: {
      c10::BFloat16 h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      return static_cast<float>(h);
    }
    case cu::FloatType::f32: break;
  }
  float f;
  std::memcpy(&f, raw.data() + 4 * i, 4);
  return f;
}

// Host bytes of x (float values already representable in `type`) stored as `type`.
std::vector<std::uint8_t> to_bytes(const std::vector<float>& x, cu::FloatType type) {
  std::vector<std::uint8_t> raw(x.size() * cu::size_of(type));
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (type == cu::FloatType::f16) {
      const c10::Half h(x[i]);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    } else if (type == cu::FloatType::bf16) {
      const c10::BFloat16 h(x[i]);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(raw.data() + 4 * i, &x[i], 4);
    }
  }
  return raw;
}

// DESIGN.md §5: s = max|x| / 127 (1 for zeros), q = clamp(round half even(x / s), −127, 127).
// nearbyint under the default rounding mode rounds half to even.
float reference_scale(float amax) { return amax > 0.0f ? amax / 127.0f : 1.0f; }
float reference_round(float x, float s) { return std::clamp(std::nearbyint(x / s), -127.0f, 127.0f); }

struct Quantised {
  std::vector<std::int8_t> q;
  std::vector<float> scales;
};

Quantised reference_quantise(const std::vector<float>& x, std::int64_t M, std::int64_t K, std::int64_t rows) {
  rows = std::min(rows, M);
  Quantised r{std::vector<std::int8_t>(x.size()), std::vector<float>(static_cast<std::size_t>((M + rows - 1) / rows))};
  for (std::size_t g = 0; g < r.scales.size(); ++g) {
    const std::int64_t begin = static_cast<std::int64_t>(g) * rows * K, end = std::min(M * K, begin + rows * K);
    float amax = 0.0f;
    for (std::int64_t i = begin; i < end; ++i) amax = std::max(amax, std::abs(x[i]));
    const float s = reference_scale(amax);
    r.scales[g] = s;
    for (std::int64_t i = begin; i < end; ++i) r.q[i] = static_cast<std::int8_t>(reference_round(x[i], s));
  }
  return r;
}

// Rows of random values (normal, times a per-row magnitude spanning 1e-3..1e3), an all-zero row,
// and a row with max 127 and exact .5 ties (its scale is exactly 1 when it holds the group max).
std::vector<float> make_activations(std::int64_t M, std::int64_t K, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_mag(-3.0f, 2.0f);
  std::vector<float> x(static_cast<std::size_t>(M * K));
  for (std::int64_t m = 0; m < M; ++m) {
    const float mag = std::pow(10.0f, log_mag(rng));
    for (std::int64_t k = 0; k < K; ++k) x[m * K + k] = normal(rng) * mag;
  }
  if (M > 1)
    for (std::int64_t k = 0; k < K; ++k) x[1 * K + k] = 0.0f;
  if (M > 2)
    for (std::int64_t k = 0; k < K; ++k) x[2 * K + k] = k == 0 ? 127.0f : (k % 2 ? -1.0f : 1.0f) * (0.5f + (k % 7));
  return x;
}

::testing::AssertionResult same_quantisation(const std::vector<std::int8_t>& q, const std::vector<float>& s,
                                             const Quantised& ref, std::int64_t K) {
  for (std::size_t g = 0; g < s.size(); ++g)
    if (s[g] != ref.scales[g])
      return ::testing::AssertionFailure() << "scale " << g << ": got " << s[g] << ", expected " << ref.scales[g];
  for (std::size_t i = 0; i < q.size(); ++i)
    if (q[i] != ref.q[i])
      return ::testing::AssertionFailure() << "q at [" << i / K << ", " << i % K << "]: got " << int{q[i]}
                                           << ", expected " << int{ref.q[i]};
  return ::testing::AssertionSuccess();
}

// Quantises through absmax_quantize_int8_rows (x at an element offset from a 256-byte aligned
// base, so offset 1 exercises the unaligned path) and checks q, the group scales and the per-row
// scales against the reference run on x as stored in `type`, widened exactly.
void check_quantise(std::int64_t M, std::int64_t K, std::int64_t rows, cu::FloatType type, std::int64_t offset,
                    std::uint32_t seed) {
  SCOPED_TRACE("M " + std::to_string(M) + ", K " + std::to_string(K) + ", rows per scale " + std::to_string(rows) +
               ", " + cu::to_string(type) + ", offset " + std::to_string(offset));
  std::vector<float> x = make_activations(M, K, seed);
  for (auto& v : x) v = round_to(type, v);  // the reference sees the stored value
  const std::int64_t groups = (M + std::min(rows, M) - 1) / std::min(rows, M);
  cu::DeviceArray<std::int8_t> q(static_cast<std::size_t>(M * K + offset));
  cu::DeviceArray<float> s(static_cast<std::size_t>(groups)), row_s(static_cast<std::size_t>(M));
  cu::fill_bytes(q.get(), 0x7F, q.size());
  cu::fill_bytes(s.get(), 0xFF, s.size() * sizeof(float));
  cu::fill_bytes(row_s.get(), 0xFF, row_s.size() * sizeof(float));
  std::vector<float> padded(static_cast<std::size_t>(offset));
  padded.insert(padded.end(), x.begin(), x.end());
  cu::DeviceArray<std::uint8_t> dx(to_bytes(padded, type));
  const Quantised ref = reference_quantise(x, M, K, rows);
  // With per-row scales (groups: the one-read cooperative kernel where the tensor fits), then
  // without (groups: the two-pass kernels).
  for (bool with_rows : {true, false}) {
    SCOPED_TRACE(with_rows ? "with per-row scales" : "without per-row scales");
    cu::fill_bytes(q.get(), 0x7F, q.size());
    cu::fill_bytes(s.get(), 0xFF, s.size() * sizeof(float));
    cu::absmax_quantize_int8_rows(dx.get() + offset * cu::size_of(type), type, M, K, rows, q.get() + offset, s.get(),
                                  with_rows ? row_s.get() : nullptr);
    cu::synchronize();
    std::vector<std::int8_t> got = q.to_host();
    got.erase(got.begin(), got.begin() + offset);
    EXPECT_TRUE(same_quantisation(got, s.to_host(), ref, K));
    if (!with_rows) continue;
    const std::vector<float> got_rows = row_s.to_host();
    for (std::int64_t m = 0; m < M; ++m)
      ASSERT_EQ(got_rows[m], ref.scales[m / std::min(rows, M)]) << "row scale " << m;
  }
}

constexpr cu::FloatType kTypes[] = {cu::FloatType::f32, cu::FloatType::f16, cu::FloatType::bf16};

}  // namespace

TEST(CudaAbsmaxQuantize, PerTokenExact) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  for (cu::FloatType t : kTypes) {
    check_quantise(5, 64, 1, t, 0, 1);      // 16-byte vector path
    check_quantise(3, 37, 1, t, 0, 2);      // scalar path (K not a vector multiple)
    check_quantise(130, 768, 1, t, 0, 3);
    check_quantise(4, 64, 1, t, 1, 4);      // misaligned x: scalar path
  }
}

TEST(CudaAbsmaxQuantize, PerTokenFromRegistersAtEveryRowLength) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  // Rows of 1, 2, 4, 8 warps with 4 vectors per thread, 8 warps with 8, and one row longer than
  // any register configuration (the block-per-row kernel); vector counts just below, at and
  // above each limit, and M not a multiple of the rows per block.
  std::uint32_t seed = 20;
  for (cu::FloatType t : kTypes) {
    const std::int64_t vec = 16 / static_cast<std::int64_t>(cu::size_of(t));
    for (std::int64_t vectors : {1, 96, 128, 129, 256, 384, 512, 1024, 1376, 2048, 2049})
      check_quantise(vectors <= 512 ? 13 : 5, vectors * vec, 1, t, 0, seed++);
  }
}

TEST(CudaAbsmaxQuantize, PerTensorAndPerSequenceExact) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  for (cu::FloatType t : kTypes) {
    check_quantise(12, 64, 4, t, 0, 5);     // three sequences of 4 tokens
    check_quantise(10, 64, 4, t, 0, 6);     // last group shorter
    check_quantise(9, 37, 9, t, 0, 7);      // one scale for the tensor, scalar path
    check_quantise(6, 96, 64, t, 0, 8);     // rows per scale above M: one scale
    check_quantise(256, 4096, 256, t, 0, 9);  // many blocks per group: the atomic max
    check_quantise(2048, 768, 1024, t, 0, 10);  // GPT-2-sized: two sequences, many resident blocks
    check_quantise(70, 24, 3, t, 0, 11);        // many short rows per block, groups inside blocks
    const std::int64_t vec = 16 / static_cast<std::int64_t>(cu::size_of(t));
    check_quantise(5, 2049 * vec, 5, t, 0, 12);  // rows longer than a block's registers: two passes
  }
}

namespace {

struct EpilogueCase {
  std::int64_t m, n, a_rows;
  bool w_per_channel, bias;
  cu::FloatType out;
  std::int64_t out_rows;  // 0: no output quantisation
};

// The order of kernels/int8_gemm.h, one rounding per step; volatile keeps the host compiler from
// fusing the steps into an FMA, which the kernel does not do either.
float reference_dequant(std::int32_t c, float sa, float sw, const float* b) {
  volatile float v = static_cast<float>(c) * sa;
  v = v * sw;
  if (b) v = v + *b;
  return v;
}

void check_epilogue(const EpilogueCase& c, std::uint32_t seed) {
  SCOPED_TRACE("M " + std::to_string(c.m) + ", N " + std::to_string(c.n) + ", a rows " + std::to_string(c.a_rows) +
               ", w per channel " + std::to_string(c.w_per_channel) + ", bias " + std::to_string(c.bias) +
               ", " + cu::to_string(c.out) + ", out rows " + std::to_string(c.out_rows));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> acc_d(-2000000, 2000000);
  std::uniform_real_distribution<float> scale_d(1e-4f, 2e-2f), bias_d(-3.0f, 3.0f);
  const std::int64_t a_groups = (c.m + c.a_rows - 1) / c.a_rows;
  std::vector<std::int32_t> acc(static_cast<std::size_t>(c.m * c.n));
  for (auto& v : acc) v = acc_d(rng);
  std::vector<float> sa(static_cast<std::size_t>(a_groups)), sw(static_cast<std::size_t>(c.w_per_channel ? c.n : 1)),
      bias(static_cast<std::size_t>(c.n));
  for (auto& v : sa) v = scale_d(rng);
  for (auto& v : sw) v = scale_d(rng);
  for (auto& v : bias) v = bias_d(rng);

  // Reference: dequantise, round to the output type, then (optionally) quantise–dequantise the
  // stored values per group of rows.
  std::vector<float> ref(acc.size());
  for (std::int64_t m = 0; m < c.m; ++m)
    for (std::int64_t n = 0; n < c.n; ++n) {
      float v = reference_dequant(acc[m * c.n + n], sa[m / c.a_rows], sw[c.w_per_channel ? n : 0],
                                  c.bias ? &bias[n] : nullptr);
      ref[m * c.n + n] = round_to(c.out, v);
    }
  std::vector<float> ref_out_scales;
  if (c.out_rows > 0) {
    const std::int64_t rows = std::min(c.out_rows, c.m);
    for (std::int64_t r0 = 0; r0 < c.m; r0 += rows) {
      const std::int64_t begin = r0 * c.n, end = std::min(c.m, r0 + rows) * c.n;
      float amax = 0.0f;
      for (std::int64_t i = begin; i < end; ++i) amax = std::max(amax, std::abs(ref[i]));
      const float s = reference_scale(amax);
      ref_out_scales.push_back(s);
      for (std::int64_t i = begin; i < end; ++i) {
        volatile float v = reference_round(ref[i], s) * s;
        ref[i] = round_to(c.out, v);
      }
    }
  }

  cu::DeviceArray<std::int32_t> dacc(acc);
  cu::DeviceArray<float> dsa(sa), dsw(sw), dbias(bias);
  cu::DeviceArray<float> dout_scales(ref_out_scales.size());
  cu::DeviceArray<std::uint8_t> dout(acc.size() * cu::size_of(c.out));
  cu::fill_bytes(dout.get(), 0xFF, dout.size());  // NaN in both types: unwritten outputs fail
  cu::Int8EpilogueArgs args;
  args.acc = dacc.get();
  args.m = c.m;
  args.n = c.n;
  args.a_scales = dsa.get();
  args.a_rows_per_scale = c.a_rows;
  args.w_scales = dsw.get();
  args.w_per_channel = c.w_per_channel;
  args.bias = c.bias ? dbias.get() : nullptr;
  args.out = dout.get();
  args.out_type = c.out;
  args.out_rows_per_scale = c.out_rows;
  args.out_scales = c.out_rows > 0 ? dout_scales.get() : nullptr;
  cu::int8_dequantize_epilogue(args);
  cu::synchronize();

  const std::vector<std::uint8_t> raw = dout.to_host();
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const float got = element(raw, i, c.out);
    ASSERT_EQ(got, ref[i]) << "at [" << i / c.n << ", " << i % c.n << "]: got " << got << ", expected " << ref[i];
  }
  const auto got_scales = dout_scales.to_host();
  for (std::size_t g = 0; g < ref_out_scales.size(); ++g)
    ASSERT_EQ(got_scales[g], ref_out_scales[g]) << "output scale " << g;
}

}  // namespace

TEST(CudaInt8Epilogue, DequantisesExactlyInTheStatedOrder) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 100;
  for (cu::FloatType t : kTypes)
    for (bool bias : {false, true}) {
      check_epilogue({7, 12, 1, true, bias, t, 0}, seed++);     // per token × per channel, vector path
      check_epilogue({7, 12, 7, false, bias, t, 0}, seed++);    // per tensor × per tensor
      check_epilogue({9, 13, 3, true, bias, t, 0}, seed++);     // per sequence, N odd: scalar path
      check_epilogue({64, 2304, 1, true, bias, t, 0}, seed++);
    }
}

TEST(CudaInt8Epilogue, CoarseOutputQuantisationExact) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 200;
  for (cu::FloatType t : kTypes) {
    check_epilogue({8, 16, 8, false, true, t, 8}, seed++);     // one output scale
    check_epilogue({12, 20, 4, false, true, t, 4}, seed++);    // one per sequence of 4
    check_epilogue({10, 7, 10, false, false, t, 4}, seed++);   // short last group, scalar path
    check_epilogue({256, 768, 256, false, true, t, 128}, seed++);
  }
}
