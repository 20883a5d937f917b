// The AVX-512 paths of the MX and NVFP4 round trips (quant/formats/mx.h, quant/formats/nvfp4.h), 16 blocks at a time:
// their maxima, then their 16 scales on 16 lanes, then their elements, 16 lanes of rounding
// inlined, where the portable loops compute each block's scale with scalar code (and library calls)
// before its elements. The same float32 operations in the same order (minifloat.h's
// round_to_element; the MX exponent by VGETEXPPS and VSCALEFPS, exact as ilogb and ldexp are), so
// the same bits, NaN and infinities included (tests/quant/float_formats_test.cpp holds them to the
// portable loops on random rows and on block maxima at every edge of the scale rules). Only
// without element codes: the oracle tests' codes come from the portable loops.
// Declared beside the portable loops they equal: mx.h, nvfp4.h (and minifloat.h the CPUID check).

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "quant/formats/minifloat.h"
#include "quant/formats/mx.h"
#include "quant/formats/nvfp4.h"

#if defined(__x86_64__) && defined(__GNUC__)
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 warns inside its own AVX-512 intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#define QEVAL_ELEMENT_BLOCKS_AVX512 1
#endif

namespace qeval {

#ifdef QEVAL_ELEMENT_BLOCKS_AVX512
namespace {

// minifloat.h's round_to_element(v / scale) · scale on 16 lanes (mask: the lanes to load and store).
struct ElementLanes {
  __m512 max_finite;
  __m512i emin;
  __m512i c_bias;  // 127 + 23 − mantissa bits: c = 2^(e − m) as bits (e + c_bias) << 23
};

__attribute__((target("avx512f"))) ElementLanes element_lanes(const ElementFormat& f) {
  return {_mm512_set1_ps(f.max_finite), _mm512_set1_epi32(f.emin), _mm512_set1_epi32(127 + 23 - f.mantissa_bits)};
}

// minifloat.h's round_to_element(v) on 16 lanes.
__attribute__((target("avx512f"))) inline __m512 round16(__m512 v, const ElementLanes& f) {
  const __m512 m = _mm512_abs_ps(v);
  const __m512 a = _mm512_min_ps(m, f.max_finite);  // m < max ? m : max (NaN: max), as the scalar code
  __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(a), 23), _mm512_set1_epi32(127));
  e = _mm512_max_epi32(e, f.emin);
  const __m512 c = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, f.c_bias), 23));
  const __m512 r = _mm512_sub_ps(_mm512_add_ps(a, c), c);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));  // r >= 0: copysign
}

// round_to_element(x / scale) · scale on 16 lanes, the division an IEEE one.
__attribute__((target("avx512f"))) inline __m512 round_trip16(__m512 x, __m512 scale, const ElementLanes& f) {
  return _mm512_mul_ps(round16(_mm512_div_ps(x, scale), f), scale);
}

// max |x| over the lanes of `mask` of a and b; NaN when any of them is NaN (row_absmax's rule).
__attribute__((target("avx512f"))) inline float block_absmax(__m512 a, __m512 b, __mmask16 ma, __mmask16 mb) {
  const __mmask16 nan = _mm512_mask_cmp_ps_mask(ma, a, a, _CMP_UNORD_Q) | _mm512_mask_cmp_ps_mask(mb, b, b, _CMP_UNORD_Q);
  if (nan) return std::numeric_limits<float>::quiet_NaN();
  const __m512 m = _mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b));  // lanes outside the masks were loaded as 0
  return _mm512_reduce_max_ps(m);
}

__mmask16 lanes(std::int64_t n) { return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u); }

}  // namespace

bool element_blocks_avx512_available() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// mx_scale_exponent of 16 block maxima on 16 lanes: ⌊log₂ amax⌋ − emax (VGETEXPPS gives ⌊log₂⌋
// of subnormals too, MXCSR's DAZ being off), one more when rounded up and amax > max_elem · 2^s,
// clamped to [−127, 127]. The round-up test is amax · 2^−s > max_elem: that product lies in
// [2^emax, 2^(emax+1)), so VSCALEFPS computes it exactly, as the scalar code's float64 product is.
// An infinite maximum gives 127, as ilogb's INT_MAX clamped does; lanes of NaN or 0 are not used.
namespace {
__attribute__((target("avx512f"))) __m512i mx_scale_exponents16(__m512 amax, const ElementFormat& f, bool round_up) {
  __m512i s = _mm512_sub_epi32(_mm512_cvtps_epi32(_mm512_getexp_ps(amax)), _mm512_set1_epi32(f.emax));
  if (round_up) {
    const __m512 within = _mm512_scalef_ps(amax, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_setzero_si512(), s)));
    const __mmask16 above = _mm512_cmp_ps_mask(within, _mm512_set1_ps(f.max_finite), _CMP_GT_OQ);
    s = _mm512_mask_add_epi32(s, above, s, _mm512_set1_epi32(1));
  }
  const __mmask16 infinite = _mm512_cmp_ps_mask(amax, _mm512_set1_ps(std::numeric_limits<float>::infinity()), _CMP_EQ_OQ);
  s = _mm512_mask_mov_epi32(s, infinite, _mm512_set1_epi32(127));
  return _mm512_min_epi32(_mm512_set1_epi32(127), _mm512_max_epi32(_mm512_set1_epi32(-127), s));
}
}  // namespace

// As for NVFP4 below: the maxima of 16 blocks first, their exponents and scales 2^s on 16 lanes
// (where mx_scale_exponent and ldexp ran per block, two library calls in every block's chain),
// then the 16 blocks' elements, their 512 values still in L1.
__attribute__((target("avx512f"))) void mx_round_trip_row_avx512(const float* x, float* y, std::int64_t n,
                                                                 const MxFormat& format, std::int8_t* exponents) {
  QEVAL_CHECK(format.block == 32, "mx_round_trip_row_avx512: blocks of 32 only, got {}", format.block);
  const ElementFormat& f = element_format(format.element);
  const ElementLanes el = element_lanes(f);
  const std::int64_t blocks = (n + 31) / 32;
  alignas(64) float amax[16], scale[16];
  alignas(64) std::int32_t s[16];
  for (std::int64_t b0 = 0; b0 < blocks; b0 += 16) {
    const std::int64_t nb = std::min<std::int64_t>(16, blocks - b0);
    for (std::int64_t j = 0; j < nb; ++j) {
      const std::int64_t begin = (b0 + j) * 32, len = std::min<std::int64_t>(32, n - begin);
      const __mmask16 m0 = lanes(len), m1 = lanes(std::max<std::int64_t>(0, len - 16));
      amax[j] = block_absmax(_mm512_maskz_loadu_ps(m0, x + begin), _mm512_maskz_loadu_ps(m1, x + begin + 16), m0, m1);
    }
    const __m512i exps = mx_scale_exponents16(_mm512_maskz_load_ps(lanes(nb), amax), f, format.scale_round_up);
    _mm512_store_si512(s, exps);
    _mm512_store_ps(scale, _mm512_scalef_ps(_mm512_set1_ps(1.0f), _mm512_cvtepi32_ps(exps)));  // 2^s, 2^−127 included
    for (std::int64_t j = 0; j < nb; ++j) {
      const std::int64_t b = b0 + j, begin = b * 32, len = std::min<std::int64_t>(32, n - begin);
      if (std::isnan(amax[j])) {  // as the portable loop: NaN out, and no exponent to give
        QEVAL_CHECK(!exponents, "MX block {}: a value is NaN, which has no element code", b);
        std::fill(y + begin, y + begin + len, std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      const __mmask16 m0 = lanes(len), m1 = lanes(std::max<std::int64_t>(0, len - 16));
      if (amax[j] == 0) {
        _mm512_mask_storeu_ps(y + begin, m0, _mm512_setzero_ps());
        _mm512_mask_storeu_ps(y + begin + 16, m1, _mm512_setzero_ps());
        if (exponents) exponents[b] = -127;
        continue;
      }
      if (exponents) exponents[b] = static_cast<std::int8_t>(s[j]);
      const __m512 sc = _mm512_set1_ps(scale[j]);
      _mm512_mask_storeu_ps(y + begin, m0, round_trip16(_mm512_maskz_loadu_ps(m0, x + begin), sc, el));
      _mm512_mask_storeu_ps(y + begin + 16, m1, round_trip16(_mm512_maskz_loadu_ps(m1, x + begin + 16), sc, el));
    }
  }
}

// Each block's scale depends on its maximum through a division and an E4M3 rounding: done one
// block at a time (the scalar nvfp4_block_scale), that chain stalled every block of 16 values. Here
// the maxima of 16 blocks are taken first, their scales computed on 16 lanes with the same float32
// operations (divide by t, min with 448 as std::min, E4M3 rounding, times s_tensor), and then the
// 16 blocks' elements rounded, their 256 values still in L1.
__attribute__((target("avx512f"))) void nvfp4_round_trip_avx512(const float* x, float* y, std::int64_t rows,
                                                                std::int64_t K, float amax_t, float* block_scales) {
  const ElementLanes e2m1 = element_lanes(element_format(ElementType::e2m1));
  const ElementLanes e4m3 = element_lanes(element_format(ElementType::e4m3));
  const float s_tensor = nvfp4_tensor_scale(amax_t);
  const float t = 6.0f * s_tensor;
  const __m512 t_lanes = _mm512_set1_ps(t), s_tensor_lanes = _mm512_set1_ps(s_tensor), max_scale = _mm512_set1_ps(448.0f);
  const std::int64_t blocks = (K + kNvfp4Block - 1) / kNvfp4Block;
  alignas(64) float amax[16], s_block[16], p[16];
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * K;
    float* yr = y + r * K;
    for (std::int64_t b0 = 0; b0 < blocks; b0 += 16) {
      const std::int64_t nb = std::min<std::int64_t>(16, blocks - b0);
      for (std::int64_t j = 0; j < nb; ++j) {
        const std::int64_t begin = (b0 + j) * kNvfp4Block;
        const __mmask16 m = lanes(K - begin);
        amax[j] = block_absmax(_mm512_maskz_loadu_ps(m, xr + begin), _mm512_setzero_ps(), m, 0);
      }
      if (t == 0) {  // nvfp4_block_scale: every scale 0
        _mm512_store_ps(s_block, _mm512_setzero_ps());
        _mm512_store_ps(p, _mm512_setzero_ps());
      } else {
        // _mm512_min_ps(448, v) is (448 < v ? 448 : v), std::min(v, 448) with a NaN v kept.
        const __m512 v = _mm512_min_ps(max_scale, _mm512_div_ps(_mm512_maskz_load_ps(lanes(nb), amax), t_lanes));
        const __m512 s = round16(v, e4m3);
        _mm512_store_ps(s_block, s);
        _mm512_store_ps(p, _mm512_mul_ps(s, s_tensor_lanes));
      }
      for (std::int64_t j = 0; j < nb; ++j) {
        const std::int64_t b = b0 + j, begin = b * kNvfp4Block;
        if (block_scales) block_scales[r * blocks + b] = s_block[j];
        const __mmask16 m = lanes(K - begin);
        const __m512 v = _mm512_maskz_loadu_ps(m, xr + begin);
        _mm512_mask_storeu_ps(yr + begin, m, p[j] == 0 ? _mm512_setzero_ps() : round_trip16(v, _mm512_set1_ps(p[j]), e2m1));
      }
    }
  }
}

#else

bool element_blocks_avx512_available() { return false; }

void mx_round_trip_row_avx512(const float*, float*, std::int64_t, const MxFormat&, std::int8_t*) {
  QEVAL_CHECK(false, "mx_round_trip_row_avx512: not built for this CPU");
}

void nvfp4_round_trip_avx512(const float*, float*, std::int64_t, std::int64_t, float, float*) {
  QEVAL_CHECK(false, "nvfp4_round_trip_avx512: not built for this CPU");
}

#endif

}  // namespace qeval
