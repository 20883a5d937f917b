#include "quant/formats/ggml/activations.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "quant/formats/ggml/quants_internal.h"

namespace qeval {

GgmlActivationType ggml_vec_dot_type(GgmlType weight) {
  switch (weight) {
    case GgmlType::F32: return GgmlActivationType::f32;
    case GgmlType::F16: return GgmlActivationType::f16;
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4: return GgmlActivationType::q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return GgmlActivationType::q8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return GgmlActivationType::q8_k;
    case GgmlType::BF16: break;
  }
  throw Error(fmt::format("ggml weight type {} has no activation type in qeval (it quantises to {}, F16 and F32)",
                          static_cast<unsigned>(weight), ggml_quant_type_names()));
}

std::string to_string(GgmlActivationType t) {
  switch (t) {
    case GgmlActivationType::f32: return "F32";
    case GgmlActivationType::f16: return "F16";
    case GgmlActivationType::q8_0: return "Q8_0";
    case GgmlActivationType::q8_1: return "Q8_1";
    case GgmlActivationType::q8_k: return "Q8_K";
  }
  return "?";
}

std::int64_t block_elements(GgmlActivationType t) {
  switch (t) {
    case GgmlActivationType::q8_0:
    case GgmlActivationType::q8_1: return QK8_0;
    case GgmlActivationType::q8_k: return QK_K;
    default: return 1;
  }
}

namespace {

constexpr float kF16Max = 65504.f;

// x86's _mm256_cvtps_epi32 (round to nearest even; NaN and out-of-range give INT32_MIN) followed
// by the saturating packs to int8 (_mm256_packs_epi32, _mm256_packs_epi16). Reachable with
// out-of-range values only where amax is so small that 127 / amax overflows to infinity (below
// about 3.7e-37); fp16(amax / 127) is 0 there and every value of the block is ±0.
inline std::int8_t x86_round_to_int8(float v) {
  const std::int32_t i = v >= -2147483648.f && v < 2147483648.f ? static_cast<std::int32_t>(std::nearbyint(v)) : INT32_MIN;
  return static_cast<std::int8_t>(std::clamp<std::int32_t>(i, -128, 127));
}

// Q8_0 and Q8_1 (their values are the same; Q8_1 adds the block sum): x86's quantize_row_q8_0.
void round_trip_q8_0_block(const float* x, float* out) {
  float amax = 0.f;
  for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = fp16_to_fp32(fp32_to_fp16(amax / 127.f));
  const float id = amax != 0.f ? 127.f / amax : 0.f;
  for (int j = 0; j < QK8_0; ++j) out[j] = d * static_cast<float>(x86_round_to_int8(x[j] * id));
}

// quantize_row_q8_K_ref, then d · q.
void round_trip_q8_k_block(const float* x, float* out) {
  float amax = 0.f, max = 0.f;
  for (int j = 0; j < QK_K; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax == 0.f) {
    std::fill(out, out + QK_K, 0.f);
    return;
  }
  const float iscale = -127.f / max;
  const float d = 1 / iscale;
  // The int8 store keeps the low byte, as C's conversion does in ggml (reachable only where
  // iscale overflows, and d is then 0).
  for (int j = 0; j < QK_K; ++j)
    out[j] = d * static_cast<float>(static_cast<std::int8_t>(std::min(127, ggml_detail::nearest_int(iscale * x[j]))));
}

void round_trip_row(const float* x, float* out, std::int64_t k, GgmlActivationType t) {
  switch (t) {
    case GgmlActivationType::f32: std::memcpy(out, x, static_cast<std::size_t>(k) * sizeof(float)); return;
    case GgmlActivationType::f16:
      for (std::int64_t j = 0; j < k; ++j) out[j] = fp16_to_fp32(fp32_to_fp16(x[j]));
      return;
    case GgmlActivationType::q8_0:
    case GgmlActivationType::q8_1:
      for (std::int64_t b = 0; b < k; b += QK8_0) round_trip_q8_0_block(x + b, out + b);
      return;
    case GgmlActivationType::q8_k:
      for (std::int64_t b = 0; b < k; b += QK_K) round_trip_q8_k_block(x + b, out + b);
      return;
  }
}

}  // namespace

at::Tensor ggml_activation_round_trip(const at::Tensor& x, GgmlActivationType t, const std::string& where) {
  QEVAL_CHECK(x.scalar_type() == at::kFloat && x.device().is_cpu(), "{}: ggml activation blocks need float32 on the CPU",
              where);
  if (t == GgmlActivationType::f32) return x;
  const std::int64_t k = x.size(-1);
  QEVAL_CHECK(k % block_elements(t) == 0, "{}: activation rows of {} values cannot be {} blocks of {}", where, k,
              to_string(t), block_elements(t));
  const at::Tensor xc = x.contiguous();
  const float limit = t == GgmlActivationType::f16 ? kF16Max : std::numeric_limits<float>::max();
  at::Tensor out = at::empty_like(xc);
  const std::int64_t rows = k ? xc.numel() / k : 0;
  const float* src = xc.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  // Each row is screened while it is in cache (NaN kept as NaN, infinity as infinity) and rounded
  // only when it is fit; the first unfit row is reported after the loop.
  std::vector<float> row_amax(static_cast<std::size_t>(rows));
  at::parallel_for(0, rows, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float* row = src + r * k;
      float amax = 0.f;
      bool nan = false;
      for (std::int64_t j = 0; j < k; ++j) {
        const float a = std::fabs(row[j]);
        nan |= a != a;
        amax = std::max(amax, a);
      }
      row_amax[static_cast<std::size_t>(r)] = nan ? std::numeric_limits<float>::quiet_NaN() : amax;
      if (!nan && amax <= limit) round_trip_row(row, dst + r * k, k, t);
    }
  });
  for (const float amax : row_amax) {
    QEVAL_CHECK(std::isfinite(amax), "{}: an input activation is {}; llama.cpp's {} blocks would hold garbage", where,
                std::isnan(amax) ? "NaN" : "infinite", to_string(t));
    QEVAL_CHECK(amax <= limit, "{}: an input activation of magnitude {} exceeds F16's largest finite value 65504 "
                "(llama.cpp's F16 dot product would overflow to infinity)", where, amax);
  }
  return out;
}

// ---- the reference: blocks as llama.cpp stores them, then their dequantisation ----

namespace {

struct block_q8_1 {  // ggml-common.h: d and s = d · Σq as fp16
  ggml_half d, s;
  std::int8_t qs[QK8_0];
};
struct block_q8_K {  // ggml-common.h
  float d;
  std::int8_t qs[QK_K];
  std::int16_t bsums[QK_K / 16];
};

// x86's quantize_row_q8_0 / _q8_1: 127 / amax, _mm256_round_ps (nearest, ties to even), then the
// saturating packs to int8.
template <typename Block>
void quantize_q8_x86(const float* x, Block& y) {
  float amax = 0.f;
  for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.f;
  y.d = fp32_to_fp16(d);
  const float id = amax != 0.f ? 127.f / amax : 0.f;
  int sum = 0;
  for (int j = 0; j < QK8_0; ++j) {
    const float v = x[j] * id;
    // _mm256_cvtps_epi32: nearest even, INT32_MIN for NaN and out of range; then saturating packs.
    const std::int32_t i = std::isfinite(v) && std::fabs(v) < 2147483648.f ? static_cast<std::int32_t>(std::lrint(v))
                                                                             : INT32_MIN;
    y.qs[j] = static_cast<std::int8_t>(i < -128 ? -128 : i > 127 ? 127 : i);
    sum += y.qs[j];
  }
  if constexpr (std::is_same_v<Block, block_q8_1>) y.s = fp32_to_fp16(d * static_cast<float>(sum));
}

void quantize_q8_k_ref(const float* x, block_q8_K& y) {
  float max = 0, amax = 0;
  for (int j = 0; j < QK_K; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (!amax) {
    y.d = 0;
    std::memset(y.qs, 0, QK_K);
    return;
  }
  const float iscale = -127.f / max;
  for (int j = 0; j < QK_K; ++j) {
    const int v = ggml_detail::nearest_int(iscale * x[j]);
    y.qs[j] = static_cast<std::int8_t>(std::min(127, v));
  }
  for (int j = 0; j < QK_K / 16; ++j) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += y.qs[j * 16 + i];
    y.bsums[j] = static_cast<std::int16_t>(sum);
  }
  y.d = 1 / iscale;
}

}  // namespace

void ggml_activation_round_trip_reference(const float* x, float* out, std::int64_t k, GgmlActivationType t) {
  switch (t) {
    case GgmlActivationType::f32:
      for (std::int64_t j = 0; j < k; ++j) out[j] = x[j];
      return;
    case GgmlActivationType::f16:
      for (std::int64_t j = 0; j < k; ++j) out[j] = fp16_to_fp32(fp32_to_fp16(x[j]));
      return;
    case GgmlActivationType::q8_0:
      for (std::int64_t b = 0; b < k; b += QK8_0) {
        block_q8_0 y;
        quantize_q8_x86(x + b, y);
        dequantize_block(y, out + b);
      }
      return;
    case GgmlActivationType::q8_1:
      for (std::int64_t b = 0; b < k; b += QK8_0) {
        block_q8_1 y;
        quantize_q8_x86(x + b, y);
        const float d = fp16_to_fp32(y.d);
        for (int j = 0; j < QK8_0; ++j) out[b + j] = d * y.qs[j];
      }
      return;
    case GgmlActivationType::q8_k:
      for (std::int64_t b = 0; b < k; b += QK_K) {
        block_q8_K y;
        quantize_q8_k_ref(x + b, y);
        for (int j = 0; j < QK_K; ++j) out[b + j] = y.d * y.qs[j];
      }
      return;
  }
}

}  // namespace qeval
