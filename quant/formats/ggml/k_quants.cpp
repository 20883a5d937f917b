// llama.cpp's K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: super-blocks of 256 values in sub-blocks
// of 16 or 32, each sub-block's scale (and min) quantised to 4 or 6 bits against an fp16
// super-block scale. Equal byte for byte to ggml_quantize_chunk at 0c1e57098: without an
// importance matrix that is quantize_row_q*_K_ref of ggml-quants.c, with one quantize_row_q*_K_impl.
//
// The scale searches (scale_searches.h) are ggml's, in float32, with its sums in its order and its
// integer conversions (nearest_int, the (int8_t)/(uint8_t) truncations). Without importance:
//   Q2_K  make_qkx2_quants(16 values, 0..3, weights |x|, 16 candidate scales, absolute error)
//   Q3_K  make_q3_quants(16 values, -4..3, weights x², up to 5 passes moving one code at a time)
//   Q4_K  make_qkx2_quants(32 values, 0..15, weights av + |x|, 21 candidates, squared error)
//   Q5_K  make_qkx2_quants(32 values, 0..31, weights av + |x|, 16 candidates, squared error)
//   Q6_K  make_qx_quants(16 values, -32..31, weights x², 18 candidates)
// then the sub-block scales are rounded (nearest_int, half to even) against the largest, stored
// as fp16 d (and dmin), and every value re-quantised with the stored (fp16 × integer) scale:
// x / d, a true division here (unlike the 32-value types' reciprocal).
//
// With importance q[0..256) per super-block (the row's columns; σ² = Σx²/256 over the super-block):
//   Q2_K  weights q·sqrt(σ² + x²), make_qkx3_quants(16 values, 0..3, 37 candidates from
//         nmax - 0.9 in steps of 0.05, squared error); sub-block scales and mins by make_qp_quants
//         (0..15) weighted by each sub-block's summed weights
//   Q3_K  weights q·sqrt(2σ² + x²), make_qx_quants(16 values, -4..3) with them; the 16 scales by
//         make_qx_quants(16, -32..31) weighted by the sub-blocks' summed weights
//   Q4_K, Q5_K  weights q·sqrt(2σ² + x²), make_qkx3_quants(32 values, 0..15 / 0..31, 37
//         candidates); scales and mins by make_qp_quants(0..63) weighted by the summed weights
//   Q6_K  make_qx_quants(16 values, -32..31) weighted by q itself (no σ²); the rest as without
// and the same re-quantisation against the stored scales. ggml's make_qkx3_quants with weights is
// its make_qkx2_quants (scale_searches.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/formats/ggml/quants.h"
#include "quant/formats/ggml/quants_internal.h"
#include "quant/formats/ggml/scale_searches.h"

namespace qeval {

using ggml_detail::check_row;
using ggml_detail::kGroupMaxEps;
using ggml_detail::make_q3_quants;
using ggml_detail::make_qkx2_quants;
using ggml_detail::make_qp_quants;
using ggml_detail::make_qx_quants;
using ggml_detail::nearest_int;
using ggml_detail::store_block;

namespace {

// Q4_K/Q5_K: the 8 six-bit scales ls and mins lm into 12 bytes (get_scale_min_k4's layout).
void pack_scales_k4(const std::uint8_t* ls, const std::uint8_t* lm, std::uint8_t* scales) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<std::uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] = static_cast<std::uint8_t>(scales[j - 4] | ((ls[j] >> 4) << 6));
      scales[j - 0] = static_cast<std::uint8_t>(scales[j - 0] | ((lm[j] >> 4) << 6));
    }
  }
}

// Q4_K/Q5_K: every value re-quantised against the stored scales and mins, codes 0..nmax into L;
// a sub-block whose stored scale is 0 keeps the search's codes, as ggml does.
void requantize_k4(const float* x, int nmax, const std::uint8_t* scales_bytes, ggml_half d16, ggml_half dmin16,
                   std::uint8_t* L) {
  for (int j = 0; j < QK_K / 32; ++j) {
    std::uint8_t sc, m;
    get_scale_min_k4(j, scales_bytes, &sc, &m);
    const float d = fp16_to_fp32(d16) * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = fp16_to_fp32(dmin16) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<std::uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

// Q4_K/Q5_K's common part: sub-block scales and mins from make_qkx2_quants, quantised to 6
// bits against the largest, then the codes L[0..256) (0..nmax) against the stored scales.
void quantize_k4_super_block(const float* x, int nmax, float rmin, int nstep, std::uint8_t* scales_bytes,
                             ggml_half* d_out, ggml_half* dmin_out, std::uint8_t* L) {
  std::uint8_t Laux[32];
  float weights[32];
  float mins[QK_K / 32];
  float scales[QK_K / 32];
  float max_scale = 0;  // the mins are subtracted, so scales are positive
  float max_min = 0;
  for (int j = 0; j < QK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::uint8_t ls[8], lm[8];
  for (int j = 0; j < QK_K / 32; ++j) {
    // ggml stores nearest_int's result in a uint8_t before the clamp: a negative scale wraps.
    ls[j] = std::min<std::uint8_t>(63, static_cast<std::uint8_t>(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<std::uint8_t>(63, static_cast<std::uint8_t>(nearest_int(inv_min * mins[j])));
  }
  std::fill(scales_bytes, scales_bytes + K_SCALE_SIZE, 0);
  pack_scales_k4(ls, lm, scales_bytes);
  *d_out = fp32_to_fp16(max_scale / 63.f);
  *dmin_out = fp32_to_fp16(max_min / 63.f);
  requantize_k4(x, nmax, scales_bytes, *d_out, *dmin_out, L);
}

// quantize_row_q4_K_impl / q5_K_impl's super-block with importance qw[0..256): weights
// qw·sqrt(2σ² + x²), make_qkx3_quants per 32 values, the scales and mins by make_qp_quants.
// Q5_K clamps the 6-bit codes to 63 (clamp_to_63); Q4_K stores them as they come (a wrapped
// negative code keeps its low bits), as ggml does.
void quantize_k4_super_block_importance(const float* x, const float* qw, int nmax, bool clamp_to_63,
                                        std::uint8_t* scales_bytes, ggml_half* d_out, ggml_half* dmin_out,
                                        std::uint8_t* L) {
  std::uint8_t Laux[32];
  std::uint8_t Ls[QK_K / 32];
  std::uint8_t Lm[QK_K / 32];
  float weights[32];
  float sw[QK_K / 32];
  float mins[QK_K / 32];
  float scales[QK_K / 32];
  float sum_x2 = 0;
  for (int l = 0; l < QK_K; ++l) sum_x2 += x[l] * x[l];
  const float sigma2 = 2 * sum_x2 / QK_K;
  for (int j = 0; j < QK_K / 32; ++j) {
    for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 32; ++l) sumw += weights[l];
    sw[j] = sumw;
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
  }
  const float d_block = make_qp_quants(QK_K / 32, 63, scales, Ls, sw);
  const float m_block = make_qp_quants(QK_K / 32, 63, mins, Lm, sw);
  if (clamp_to_63) {
    for (int j = 0; j < QK_K / 32; ++j) {
      Ls[j] = std::min<std::uint8_t>(63, Ls[j]);
      Lm[j] = std::min<std::uint8_t>(63, Lm[j]);
    }
  }
  std::fill(scales_bytes, scales_bytes + K_SCALE_SIZE, 0);
  pack_scales_k4(Ls, Lm, scales_bytes);
  *d_out = fp32_to_fp16(d_block);
  *dmin_out = fp32_to_fp16(m_block);
  requantize_k4(x, nmax, scales_bytes, *d_out, *dmin_out, L);
}

// Q2_K: re-quantise against the stored 4-bit scales and mins (a sub-block whose scale is 0 keeps
// the search's codes), then pack four 2-bit codes per byte.
void requantize_pack_q2_K(const float* x, block_q2_K& y, std::uint8_t* L) {
  for (int j = 0; j < QK_K / 16; ++j) {
    const float d = fp16_to_fp32(y.d) * static_cast<float>(y.scales[j] & 0xF);
    if (d == 0.0f) continue;
    const float dm = fp16_to_fp32(y.dmin) * static_cast<float>(y.scales[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearest_int((x[16 * j + ii] + dm) / d);
      L[16 * j + ii] = static_cast<std::uint8_t>(std::max(0, std::min(3, l)));
    }
  }
  for (int j = 0; j < QK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      y.qs[j / 4 + l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                                  (L[j + l + 96] << 6));
}

// Q3_K: sub-block j's 6-bit scale code l (0..63, the scale + 32) into the 12 scale bytes.
void set_q3_K_scale(block_q3_K& y, int j, int l) {
  if (j < 8) {
    y.scales[j] = static_cast<std::uint8_t>(l & 0xF);
  } else {
    y.scales[j - 8] = static_cast<std::uint8_t>(y.scales[j - 8] | ((l & 0xF) << 4));
  }
  l >>= 4;
  y.scales[j % 4 + 8] = static_cast<std::uint8_t>(y.scales[j % 4 + 8] | (l << (2 * (j / 4))));
}

// Q3_K: re-quantise against the stored scales (a sub-block whose scale is 0 keeps the search's
// codes), then the high bits (element j's in bit j / 32 of hmask[j % 32]) and the low 2 bits.
void requantize_pack_q3_K(const float* x, block_q3_K& y, std::int8_t* L) {
  for (int j = 0; j < QK_K / 16; ++j) {
    std::int8_t sc = static_cast<std::int8_t>(j < 8 ? y.scales[j] & 0xF : y.scales[j - 8] >> 4);
    sc = static_cast<std::int8_t>((sc | (((y.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
    const float d = fp16_to_fp32(y.d) * static_cast<float>(sc);
    if (d == 0.0f) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearest_int(x[16 * j + ii] / d);
      L[16 * j + ii] = static_cast<std::int8_t>(std::max(-4, std::min(3, l)) + 4);
    }
  }
  std::fill(y.hmask, y.hmask + QK_K / 8, 0);
  int m = 0;
  std::uint8_t hm = 1;
  for (int j = 0; j < QK_K; ++j) {
    if (L[j] > 3) {
      y.hmask[m] = static_cast<std::uint8_t>(y.hmask[m] | hm);
      L[j] = static_cast<std::int8_t>(L[j] - 4);
    }
    if (++m == QK_K / 8) {
      m = 0;
      hm = static_cast<std::uint8_t>(hm << 1);
    }
  }
  for (int j = 0; j < QK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      y.qs[j / 4 + l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                                  (L[j + l + 96] << 6));
}

void pack_q4_K(const std::uint8_t* L, block_q4_K& y) {
  std::uint8_t* q = y.qs;
  for (int j = 0; j < QK_K; j += 64, q += 32)
    for (int l = 0; l < 32; ++l) q[l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 4));
}

void pack_q5_K(const std::uint8_t* L, block_q5_K& y) {
  std::uint8_t* qh = y.qh;
  std::uint8_t* ql = y.qs;
  std::fill(qh, qh + QK_K / 8, 0);
  std::uint8_t m1 = 1, m2 = 2;
  for (int n0 = 0; n0 < QK_K; n0 += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n0 + j];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] = static_cast<std::uint8_t>(qh[j] | m1);
      }
      int l2 = L[n0 + j + 32];
      if (l2 > 15) {
        l2 -= 16;
        qh[j] = static_cast<std::uint8_t>(qh[j] | m2);
      }
      ql[j] = static_cast<std::uint8_t>(l1 | (l2 << 4));
    }
    m1 = static_cast<std::uint8_t>(m1 << 2);
    m2 = static_cast<std::uint8_t>(m2 << 2);
  }
}

// Q6_K's super-block, ref (kWeighted false: weights x²) or impl (weights qw[0..256) as given),
// into a zeroed y; an all-zero super-block (every sub-block scale below 1e-15) leaves y zero.
template <bool kWeighted>
void quantize_q6_K_super_block(const float* x, const float* qw, block_q6_K& y) {
  std::int8_t L[QK_K];
  float scales[QK_K / 16];
  float max_scale = 0;
  float max_abs_scale = 0;
  for (int ib = 0; ib < QK_K / 16; ++ib) {
    const float scale = make_qx_quants<kWeighted>(16, 32, x + 16 * ib, L + 16 * ib, kWeighted ? qw + 16 * ib : nullptr);
    scales[ib] = scale;
    const float abs_scale = std::fabs(scale);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scale;
    }
  }
  if (max_abs_scale < kGroupMaxEps) return;
  const float iscale = -128.f / max_scale;
  y.d = fp32_to_fp16(1 / iscale);
  for (int ib = 0; ib < QK_K / 16; ++ib)
    y.scales[ib] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
  for (int j = 0; j < QK_K / 16; ++j) {
    const float d = fp16_to_fp32(y.d) * static_cast<float>(y.scales[j]);
    if (d == 0.0f) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearest_int(x[16 * j + ii] / d);
      L[16 * j + ii] = static_cast<std::int8_t>(std::max(-32, std::min(31, l)) + 32);
    }
  }
  std::uint8_t* ql = y.ql;
  std::uint8_t* qh = y.qh;
  for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l + 0] & 0xF;
      const int q2 = L[j + l + 32] & 0xF;
      const int q3 = L[j + l + 64] & 0xF;
      const int q4 = L[j + l + 96] & 0xF;
      ql[l + 0] = static_cast<std::uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<std::uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<std::uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                        ((L[j + l + 96] >> 4) << 6));
    }
  }
}

// ---- with importance: quantize_row_q*_K_impl, one super-block of x and of qw at a time ----

void q2_K_super_block_importance(const float* x, const float* qw, block_q2_K& y) {
  std::uint8_t L[QK_K];
  std::uint8_t Laux[16];
  float mins[QK_K / 16];
  float scales[QK_K / 16];
  float sw[QK_K / 16] = {};
  float weight[16];
  std::uint8_t Ls[QK_K / 16], Lm[QK_K / 16];
  float sumx2 = 0;
  for (int j = 0; j < QK_K; ++j) sumx2 += x[j] * x[j];
  const float sigma2 = sumx2 / QK_K;
  for (int j = 0; j < QK_K / 16; ++j) {
    for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
    for (int l = 0; l < QK_K / 16; ++l) sw[j] += weight[l];
    scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
  }
  const float dm = make_qp_quants(QK_K / 16, 15, scales, Ls, sw);
  const float mm = make_qp_quants(QK_K / 16, 15, mins, Lm, sw);
  y.d = fp32_to_fp16(dm);
  y.dmin = fp32_to_fp16(mm);
  for (int j = 0; j < QK_K / 16; ++j) y.scales[j] = static_cast<std::uint8_t>(Ls[j] | (Lm[j] << 4));
  requantize_pack_q2_K(x, y, L);
}

void q3_K_super_block_importance(const float* x, const float* qw, block_q3_K& y) {
  std::int8_t L[QK_K];
  float scales[QK_K / 16];
  float weight[16];
  float sw[QK_K / 16];
  std::int8_t Ls[QK_K / 16];
  float sumx2 = 0;
  for (int j = 0; j < QK_K; ++j) sumx2 += x[j] * x[j];
  const float sigma2 = 2 * sumx2 / QK_K;
  for (int j = 0; j < QK_K / 16; ++j) {
    for (int l = 0; l < 16; ++l) weight[l] = qw[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
    float sumw = 0;
    for (int l = 0; l < 16; ++l) sumw += weight[l];
    sw[j] = sumw;
    scales[j] = make_qx_quants<true>(16, 4, x + 16 * j, L + 16 * j, weight);
  }
  std::fill(y.scales, y.scales + 12, 0);
  const float d_block = make_qx_quants<true>(QK_K / 16, 32, scales, Ls, sw);
  for (int j = 0; j < QK_K / 16; ++j) set_q3_K_scale(y, j, Ls[j]);
  y.d = fp32_to_fp16(d_block);
  requantize_pack_q3_K(x, y, L);
}

}  // namespace

void quantize_row_q2_K(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK_K, "q2_K");
  std::uint8_t L[QK_K];
  std::uint8_t Laux[16];
  float weights[16];
  float mins[QK_K / 16];
  float scales[QK_K / 16];
  const float q4scale = 15.f;
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q2_K y{};
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) y.scales[j] = static_cast<std::uint8_t>(nearest_int(iscale * scales[j]));
      y.d = fp32_to_fp16(max_scale / q4scale);
    } else {
      for (int j = 0; j < QK_K / 16; ++j) y.scales[j] = 0;
      y.d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < QK_K / 16; ++j) {
        const int l = nearest_int(iscale * mins[j]);
        y.scales[j] = static_cast<std::uint8_t>(y.scales[j] | static_cast<std::uint8_t>(static_cast<unsigned>(l) << 4));
      }
      y.dmin = fp32_to_fp16(max_min / q4scale);
    } else {
      y.dmin = fp32_to_fp16(0.f);
    }
    requantize_pack_q2_K(x, y, L);
    store_block(blocks, i, y);
  }
}

void quantize_row_q3_K(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK_K, "q3_K");
  std::int8_t L[QK_K];
  float scales[QK_K / 16];
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q3_K y{};
    float max_scale = 0;
    float amax = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::fill(y.scales, y.scales + 12, 0);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) {
        // ggml keeps nearest_int's result in an int8_t, then clamps and offsets it.
        std::int8_t l = static_cast<std::int8_t>(nearest_int(iscale * scales[j]));
        l = static_cast<std::int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
        set_q3_K_scale(y, j, l);
      }
      y.d = fp32_to_fp16(1 / iscale);
    } else {
      y.d = fp32_to_fp16(0.f);
    }
    requantize_pack_q3_K(x, y, L);
    store_block(blocks, i, y);
  }
}

void quantize_row_q4_K(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK_K, "q4_K");
  std::uint8_t L[QK_K];
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q4_K y{};
    quantize_k4_super_block(x, 15, -1.f, 20, y.scales, &y.d, &y.dmin, L);
    pack_q4_K(L, y);
    store_block(blocks, i, y);
  }
}

void quantize_row_q5_K(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK_K, "q5_K");
  std::uint8_t L[QK_K];
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q5_K y{};
    quantize_k4_super_block(x, 31, -0.5f, 15, y.scales, &y.d, &y.dmin, L);
    pack_q5_K(L, y);
    store_block(blocks, i, y);
  }
}

void quantize_row_q6_K(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK_K, "q6_K");
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q6_K y{};  // an all-zero super-block stays all zero bytes (d = +0), as in ggml
    quantize_q6_K_super_block<false>(x, nullptr, y);
    store_block(blocks, i, y);
  }
}

// ---- with importance (quantize_row_q*_K_impl); nullptr is the plain path ----

void quantize_row_q2_K(const float* x, void* blocks, std::int64_t n, const float* importance) {
  if (!importance) return quantize_row_q2_K(x, blocks, n);
  check_row(n, QK_K, "q2_K");
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q2_K y{};
    q2_K_super_block_importance(x, importance + i * QK_K, y);
    store_block(blocks, i, y);
  }
}

void quantize_row_q3_K(const float* x, void* blocks, std::int64_t n, const float* importance) {
  if (!importance) return quantize_row_q3_K(x, blocks, n);
  check_row(n, QK_K, "q3_K");
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q3_K y{};
    q3_K_super_block_importance(x, importance + i * QK_K, y);
    store_block(blocks, i, y);
  }
}

void quantize_row_q4_K(const float* x, void* blocks, std::int64_t n, const float* importance) {
  if (!importance) return quantize_row_q4_K(x, blocks, n);
  check_row(n, QK_K, "q4_K");
  std::uint8_t L[QK_K];
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q4_K y{};
    quantize_k4_super_block_importance(x, importance + i * QK_K, 15, false, y.scales, &y.d, &y.dmin, L);
    pack_q4_K(L, y);
    store_block(blocks, i, y);
  }
}

void quantize_row_q5_K(const float* x, void* blocks, std::int64_t n, const float* importance) {
  if (!importance) return quantize_row_q5_K(x, blocks, n);
  check_row(n, QK_K, "q5_K");
  std::uint8_t L[QK_K];
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q5_K y{};
    quantize_k4_super_block_importance(x, importance + i * QK_K, 31, true, y.scales, &y.d, &y.dmin, L);
    pack_q5_K(L, y);
    store_block(blocks, i, y);
  }
}

void quantize_row_q6_K(const float* x, void* blocks, std::int64_t n, const float* importance) {
  if (!importance) return quantize_row_q6_K(x, blocks, n);
  check_row(n, QK_K, "q6_K");
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q6_K y{};
    quantize_q6_K_super_block<true>(x, importance + i * QK_K, y);
    store_block(blocks, i, y);
  }
}

void dequantize_row_q2_K(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_q2_K>(blocks, y, n, QK_K, "q2_K");
}
void dequantize_row_q3_K(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_q3_K>(blocks, y, n, QK_K, "q3_K");
}
void dequantize_row_q4_K(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_q4_K>(blocks, y, n, QK_K, "q4_K");
}
void dequantize_row_q5_K(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_q5_K>(blocks, y, n, QK_K, "q5_K");
}
void dequantize_row_q6_K(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_q6_K>(blocks, y, n, QK_K, "q6_K");
}

}  // namespace qeval
