// llama.cpp's K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: super-blocks of 256 values in sub-blocks
// of 16 or 32, each sub-block's scale (and min) quantised to 4 or 6 bits against an fp16
// super-block scale. Equal byte for byte to quantize_row_q*_K_ref of ggml-quants.c at 0c1e57098,
// which ggml_quantize_chunk calls for these types without an importance matrix.
//
// The scale searches are ggml's, in float32, with its sums in its order and its integer
// conversions (nearest_int, the (int8_t)/(uint8_t) truncations):
//   Q2_K  make_qkx2_quants(16 values, 0..3, weights |x|, 16 candidate scales, absolute error)
//   Q3_K  make_q3_quants(16 values, -4..3, weights x², up to 5 passes moving one code at a time)
//   Q4_K  make_qkx2_quants(32 values, 0..15, weights av + |x|, 21 candidates, squared error)
//   Q5_K  make_qkx2_quants(32 values, 0..31, weights av + |x|, 16 candidates, squared error)
//   Q6_K  make_qx_quants(16 values, -32..31, weights x², 18 candidates)
// then the sub-block scales are rounded (nearest_int, half to even) against the largest, stored
// as fp16 d (and dmin), and every value re-quantised with the stored (fp16 × integer) scale:
// x / d, a true division here (unlike the 32-value types' reciprocal).
#include <algorithm>
#include <cmath>

#include "quant/formats/ggml/quants.h"
#include "quant/formats/ggml/quants_internal.h"

namespace qeval {

using ggml_detail::check_row;
using ggml_detail::kGroupMaxEps;
using ggml_detail::nearest_int;
using ggml_detail::store_block;

namespace {


// ggml's make_qkx2_quants: x ≈ scale * L - the_min with L in [0, nmax] and the_min >= 0,
// minimising Σ w·|err| (use_mad) or Σ w·err² over nstep + 1 candidate scales
// (nmax + rmin + rdelta·is) / (max - min). Returns the scale; L[0..n) the codes.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, std::uint8_t* L, float* the_min,
                       std::uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<std::uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<std::uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// ggml's make_q3_quants with do_rmse: x ≈ scale * (L - nmax), L - nmax in [-nmax, nmax - 1],
// starting from -nmax / max and moving one code at a time while Σx²·err² falls.
float make_q3_quants(int n, int nmax, const float* x, std::int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<std::int8_t>(l);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          const float fl = static_cast<float>(new_l);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<std::int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<std::int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights: x ≈ scale * (L - nmax),
// weights x², 18 candidate scales -(nmax + 0.1·is) / max around the first.
float make_qx_quants(int n, int nmax, const float* x, std::int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<std::int8_t>(l + nmax);
    const float w = x[i] * x[i];
    const float fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      const float fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<std::int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

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
  for (int j = 0; j < QK_K / 32; ++j) {
    std::uint8_t sc, m;
    get_scale_min_k4(j, scales_bytes, &sc, &m);
    const float d = fp16_to_fp32(*d_out) * static_cast<float>(sc);
    if (d == 0.0f) continue;  // keeps make_qkx2_quants's codes, as ggml does
    const float dm = fp16_to_fp32(*dmin_out) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<std::uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
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
        if (j < 8) {
          y.scales[j] = static_cast<std::uint8_t>(l & 0xF);
        } else {
          y.scales[j - 8] = static_cast<std::uint8_t>(y.scales[j - 8] | ((l & 0xF) << 4));
        }
        l = static_cast<std::int8_t>(l >> 4);
        y.scales[j % 4 + 8] = static_cast<std::uint8_t>(y.scales[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      y.d = fp32_to_fp16(1 / iscale);
    } else {
      y.d = fp32_to_fp16(0.f);
    }
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
    // High bits: element j's in bit j / 32 of hmask[j % 32].
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
    store_block(blocks, i, y);
  }
}

void quantize_row_q4_K(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK_K, "q4_K");
  std::uint8_t L[QK_K];
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q4_K y{};
    quantize_k4_super_block(x, 15, -1.f, 20, y.scales, &y.d, &y.dmin, L);
    std::uint8_t* q = y.qs;
    for (int j = 0; j < QK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    store_block(blocks, i, y);
  }
}

void quantize_row_q5_K(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK_K, "q5_K");
  std::uint8_t L[QK_K];
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q5_K y{};
    quantize_k4_super_block(x, 31, -0.5f, 15, y.scales, &y.d, &y.dmin, L);
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
    store_block(blocks, i, y);
  }
}

void quantize_row_q6_K(const float* x, void* blocks, std::int64_t n) {
  check_row(n, QK_K, "q6_K");
  std::int8_t L[QK_K];
  float scales[QK_K / 16];
  for (std::int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    block_q6_K y{};
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {  // all zero: an all-zero block (d = +0)
      store_block(blocks, i, y);
      continue;
    }
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
