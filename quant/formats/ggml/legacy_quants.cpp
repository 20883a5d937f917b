// llama.cpp's 32-value block quantisers Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (quantize_row_*_ref of
// ggml-quants.c at 0c1e57098, which ggml_quantize_chunk calls for these types without an
// importance matrix), and their dequantisers. Layouts: quant/formats/ggml/blocks.h.
//
// The rules, as ggml writes them (the tests change each and see the bytes differ):
//   * the scale is found in float32 and stored as fp16, but the codes use 1/d of the float32 d,
//     a multiplication by the reciprocal (never x / d): the codes of a block do not see the
//     fp16 rounding of its own scale;
//   * Q8_0: roundf, half away from zero; Q4_0/Q5_0: trunc(x/d + 8.5 / 16.5), i.e. half up,
//     with d = max / -8 (-16) taken from the signed value of largest magnitude (the first one
//     on a tie of magnitudes), so that value maps to code 0 and its opposite would be 16 (32),
//     clamped to 15 (31);
//   * Q4_1/Q5_1: trunc((x - min)/d + 0.5) (half up); Q4_1 clamps to 15, Q5_1 does not clamp
//     (ggml's (uint8_t) cast, kept: a code of 32 is not reachable from a finite block).
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "quant/formats/ggml/quants.h"
#include "quant/formats/ggml/quants_internal.h"

namespace qeval {

using ggml_detail::round_half_away_small;
using ggml_detail::check_row;
using ggml_detail::store_block;
using ggml_detail::trunc_to_int8;
using ggml_detail::trunc_to_uint8;

namespace {

// The signed value of largest |v| (the first of equal magnitudes), as Q4_0/Q5_0 take it.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

void min_max(const float* x, int n, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

}  // namespace

void quantize_row_q8_0(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK8_0, "q8_0");
  for (std::int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);  // ggml's MAX
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q8_0 b;
    b.d = fp32_to_fp16(d);
    // |x[j] · id| <= amax · (127 / amax) rounds to at most 127 (plus a few ulps): within
    // round_half_away_small's range, and the same code as trunc_to_int8(roundf(...)).
    for (int j = 0; j < QK8_0; ++j) b.qs[j] = static_cast<std::int8_t>(round_half_away_small(x[j] * id));
    store_block(blocks, i, b);
  }
}

void quantize_row_q4_0(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK4_0, "q4_0");
  for (std::int64_t i = 0; i < n / QK4_0; ++i, x += QK4_0) {
    const float d = signed_absmax(x, QK4_0) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q4_0 b;
    b.d = fp32_to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(trunc_to_int8(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(trunc_to_int8(x[j + QK4_0 / 2] * id + 8.5f)));
      b.qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
    }
    store_block(blocks, i, b);
  }
}

void quantize_row_q4_1(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK4_1, "q4_1");
  for (std::int64_t i = 0; i < n / QK4_1; ++i, x += QK4_1) {
    float min, max;
    min_max(x, QK4_1, &min, &max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q4_1 b;
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(min);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(trunc_to_int8((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(15, static_cast<int>(trunc_to_int8((x[j + QK4_1 / 2] - min) * id + 0.5f)));
      b.qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
    }
    store_block(blocks, i, b);
  }
}

namespace {

// Q5_0/Q5_1: low nibbles as Q4_0, the fifth bit of element j in bit j of qh (little-endian u32).
template <typename Block>
void pack_q5(const std::uint8_t (&q)[32], Block* b) {
  std::uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    b->qs[j] = static_cast<std::uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
    qh |= static_cast<std::uint32_t>((q[j] & 0x10u) >> 4) << j;
    qh |= static_cast<std::uint32_t>((q[j + 16] & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(b->qh, &qh, sizeof qh);
}

}  // namespace

void quantize_row_q5_0(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK5_0, "q5_0");
  for (std::int64_t i = 0; i < n / QK5_0; ++i, x += QK5_0) {
    const float d = signed_absmax(x, QK5_0) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q5_0 b;
    b.d = fp32_to_fp16(d);
    std::uint8_t q[QK5_0];
    for (int j = 0; j < QK5_0; ++j) q[j] = static_cast<std::uint8_t>(std::min(31, static_cast<int>(trunc_to_int8(x[j] * id + 16.5f))));
    pack_q5(q, &b);
    store_block(blocks, i, b);
  }
}

void quantize_row_q5_1(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK5_1, "q5_1");
  for (std::int64_t i = 0; i < n / QK5_1; ++i, x += QK5_1) {
    float min, max;
    min_max(x, QK5_1, &min, &max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q5_1 b;
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(min);
    std::uint8_t q[QK5_1];
    for (int j = 0; j < QK5_1; ++j) q[j] = trunc_to_uint8((x[j] - min) * id + 0.5f);
    pack_q5(q, &b);
    store_block(blocks, i, b);
  }
}

void dequantize_row_q4_0(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_q4_0>(blocks, y, n, QK4_0, "q4_0");
}
void dequantize_row_q4_1(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_q4_1>(blocks, y, n, QK4_1, "q4_1");
}
void dequantize_row_q5_0(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_q5_0>(blocks, y, n, QK5_0, "q5_0");
}
void dequantize_row_q5_1(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_q5_1>(blocks, y, n, QK5_1, "q5_1");
}
void dequantize_row_q8_0(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_q8_0>(blocks, y, n, QK8_0, "q8_0");
}

}  // namespace qeval
