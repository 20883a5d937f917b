// llama.cpp's 32-value block quantisers Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and their dequantisers, as
// ggml_quantize_chunk at 0c1e57098 writes them: without an importance matrix quantize_row_*_ref of
// ggml-quants.c, with one quantize_row_*_impl (below, "With importance"); Q8_0 ignores it, as
// ggml's quantize_q8_0 does. Layouts: quant/formats/ggml/blocks.h.
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
//
// With importance q[0..n) (one weight per column of the row), per block of 32, σ² = Σx²/n over
// the WHOLE row (so these rows must be given whole: a row split across calls gets other bytes):
//   weights w = q·sqrt(σ² + x²);
//   Q4_0, Q5_0  make_qx_quants(32 values, -8..7 / -16..15, weights w): 18 candidate scales,
//               each refitted by weighted least squares; d = that scale (stored fp16), codes as found
//   Q4_1, Q5_1  make_qkx3_quants(32 values, 0..15 / 0..31, weights w, 37 candidates from
//               nmax - 0.9 in steps of 0.05, squared error); d and m = -min stored fp16
// The codes are the search's, never re-derived from the fp16 scale.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "quant/formats/ggml/quants.h"
#include "quant/formats/ggml/quants_internal.h"
#include "quant/formats/ggml/scale_searches.h"

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

// ---- with importance: quantize_row_*_impl ----

// Σx²/n over the whole row, summed in order (ggml's sigma2).
float row_sigma2(const float* x, std::int64_t n) {
  float sum_x2 = 0;
  for (std::int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
  return sum_x2 / static_cast<float>(n);
}

void block_weights(const float* xb, const float* qw, float sigma2, float* weight) {
  for (int j = 0; j < 32; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
}

// Q4_0 (nmax 8) and Q5_0 (nmax 16): codes L + nmax in [0, 2·nmax) from make_qx_quants.
template <typename Block, int kNmax>
void quantize_row_symmetric_importance(const float* x, void* blocks, std::int64_t n, const float* importance) {
  const float sigma2 = row_sigma2(x, n);
  float weight[32];
  std::int8_t L[32];
  for (std::int64_t ib = 0; ib < n / 32; ++ib) {
    const float* xb = x + 32 * ib;
    block_weights(xb, importance + 32 * ib, sigma2, weight);
    const float d = ggml_detail::make_qx_quants<true>(32, kNmax, xb, L, weight);
    Block b;
    b.d = fp32_to_fp16(d);
    if constexpr (kNmax == 8) {
      for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(L[j] | (L[j + 16] << 4));
    } else {
      std::uint8_t q[32];
      for (int j = 0; j < 32; ++j) q[j] = static_cast<std::uint8_t>(L[j]);
      pack_q5(q, &b);
    }
    store_block(blocks, ib, b);
  }
}

// Q4_1 (nmax 15) and Q5_1 (nmax 31): make_qkx3_quants (= make_qkx2_quants given weights).
template <typename Block, int kNmax>
void quantize_row_with_min_importance(const float* x, void* blocks, std::int64_t n, const float* importance) {
  const float sigma2 = row_sigma2(x, n);
  float weight[32];
  std::uint8_t L[32], Laux[32];
  for (std::int64_t ib = 0; ib < n / 32; ++ib) {
    const float* xb = x + 32 * ib;
    block_weights(xb, importance + 32 * ib, sigma2, weight);
    float min;
    const float d = ggml_detail::make_qkx2_quants(32, kNmax, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, false);
    Block b;
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(-min);
    if constexpr (kNmax == 15) {
      for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(L[j] | (L[j + 16] << 4));
    } else {
      pack_q5(L, &b);
    }
    store_block(blocks, ib, b);
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

// With importance (quantize_row_*_impl); nullptr is the plain path.
void quantize_row_q4_0(const float* x, void* blocks, std::int64_t n, const float* importance) {
  if (!importance) return quantize_row_q4_0(x, blocks, n);
  check_row(n, QK4_0, "q4_0");
  quantize_row_symmetric_importance<block_q4_0, 8>(x, blocks, n, importance);
}
void quantize_row_q5_0(const float* x, void* blocks, std::int64_t n, const float* importance) {
  if (!importance) return quantize_row_q5_0(x, blocks, n);
  check_row(n, QK5_0, "q5_0");
  quantize_row_symmetric_importance<block_q5_0, 16>(x, blocks, n, importance);
}
void quantize_row_q4_1(const float* x, void* blocks, std::int64_t n, const float* importance) {
  if (!importance) return quantize_row_q4_1(x, blocks, n);
  check_row(n, QK4_1, "q4_1");
  quantize_row_with_min_importance<block_q4_1, 15>(x, blocks, n, importance);
}
void quantize_row_q5_1(const float* x, void* blocks, std::int64_t n, const float* importance) {
  if (!importance) return quantize_row_q5_1(x, blocks, n);
  check_row(n, QK5_1, "q5_1");
  quantize_row_with_min_importance<block_q5_1, 31>(x, blocks, n, importance);
}
// ggml's quantize_q8_0 never reads the importance matrix: the plain path either way.
void quantize_row_q8_0(const float* x, void* blocks, std::int64_t n, const float* /*importance*/) {
  quantize_row_q8_0(x, blocks, n);
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
