// llama.cpp's IQ4_NL: blocks of 32 values, x = d * g with g from a fixed non-uniform grid of 16
// integers (kvalues_iq4nl, -127..113) and d an fp16 scale. Equal byte for byte to what
// ggml_quantize_chunk(GGML_TYPE_IQ4_NL, ..., imatrix = NULL) writes at llama.cpp 0c1e57098:
// quantize_iq4_nl, i.e. quantize_row_iq4_nl_impl(32, 32, ..., weights = NULL, ntry = 7), and not
// quantize_row_iq4_nl_ref (ntry = -1, one scale), which no model file is written with.
//
// Per block (weights w = x², since there is no importance matrix):
//   1. d = max / 127 (max the signed value of largest |x|); codes = the nearest grid value to
//      x / d (best_index_int8: a tie between two grid values goes to the lower one);
//      d = Σ w·g·x / Σ w·g² (the weighted least-squares scale for those codes);
//   2. 15 more candidates: codes for the inverse scale (itry - 127) / max, itry = -7..7, kept
//      when their least-squares fit Σwgx² / Σwg² is better;
//   3. store fp16(d), and re-choose every code against the float32 d (not its fp16 rounding).
// A block with max |x| < 1e-15 gets d = 0 and every code 8 (grid value 1, nearest to 0).
//
// With importance q[0..n) (one weight per column), the same search with weights
// w = q·sqrt(σ² + x²), σ² = 2·Σx²/32 over the block (ggml's sigma2 * 2/super_block_size):
// quantize_row_iq4_nl_impl's quant_weights path.
#include <cmath>

#include "quant/formats/ggml/quants.h"
#include "quant/formats/ggml/quants_internal.h"

namespace qeval {

namespace {

// ggml's best_index_int8 for a sorted grid of n values: the index of the value nearest to x,
// the lower one on a tie (and the ends beyond the grid).
int best_index_int8(int n, const std::int8_t* val, float x) {
  if (x <= static_cast<float>(val[0])) return 0;
  if (x >= static_cast<float>(val[n - 1])) return n - 1;
  int ml = 0, mu = n - 1;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < static_cast<float>(val[mav]))
      mu = mav;
    else
      ml = mav;
  }
  return x - static_cast<float>(val[mu - 1]) < static_cast<float>(val[mu]) - x ? mu - 1 : mu;
}

// weight[0..32): the search's weights (x² without importance).
void quantize_block_iq4_nl(const float* x, const float* weight, block_iq4_nl* y) {
  constexpr int ntry = 7;
  const std::int8_t* values = kvalues_iq4nl;
  std::uint8_t L[QK4_NL];
  float amax = 0, max = 0;
  for (int j = 0; j < QK4_NL; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  float scale = 0;
  if (amax >= ggml_detail::kGroupMaxEps) {
    float d = -max / static_cast<float>(values[0]);
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < QK4_NL; ++j) {
      const int l = best_index_int8(16, values, id * x[j]);
      L[j] = static_cast<std::uint8_t>(l);
      const float q = static_cast<float>(values[l]);
      const float w = weight[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; ++itry) {
      id = static_cast<float>(itry + values[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < QK4_NL; ++j) {
        const int l = best_index_int8(16, values, id * x[j]);
        const float q = static_cast<float>(values[l]);
        const float w = weight[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scale = d;
  }
  y->d = fp32_to_fp16(scale);
  const float id = scale != 0.0f ? 1 / scale : 0;
  for (int j = 0; j < QK4_NL; ++j) L[j] = static_cast<std::uint8_t>(best_index_int8(16, values, id * x[j]));
  for (int j = 0; j < 16; ++j) y->qs[j] = static_cast<std::uint8_t>(L[j] | (L[16 + j] << 4));
}

}  // namespace

void quantize_row_iq4_nl(const float* x, void* blocks, std::int64_t n) {
  ggml_detail::check_row(n, QK4_NL, "iq4_nl");
  float weight[QK4_NL];
  for (std::int64_t i = 0; i < n / QK4_NL; ++i) {
    const float* xb = x + i * QK4_NL;
    for (int j = 0; j < QK4_NL; ++j) weight[j] = xb[j] * xb[j];
    block_iq4_nl b;
    quantize_block_iq4_nl(xb, weight, &b);
    ggml_detail::store_block(blocks, i, b);
  }
}

void quantize_row_iq4_nl(const float* x, void* blocks, std::int64_t n, const float* importance) {
  if (!importance) return quantize_row_iq4_nl(x, blocks, n);
  ggml_detail::check_row(n, QK4_NL, "iq4_nl");
  float weight[QK4_NL];
  for (std::int64_t i = 0; i < n / QK4_NL; ++i) {
    const float* xb = x + i * QK4_NL;
    const float* qw = importance + i * QK4_NL;
    float sigma2 = 0;
    for (int j = 0; j < QK4_NL; ++j) sigma2 += xb[j] * xb[j];
    sigma2 *= 2.f / QK4_NL;
    for (int j = 0; j < QK4_NL; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
    block_iq4_nl b;
    quantize_block_iq4_nl(xb, weight, &b);
    ggml_detail::store_block(blocks, i, b);
  }
}

void dequantize_row_iq4_nl(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_iq4_nl>(blocks, y, n, QK4_NL, "iq4_nl");
}

}  // namespace qeval
