#include "quant/element_blocks_avx512.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "quant/minifloat.h"
#include "quant/nvfp4.h"

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

__attribute__((target("avx512f"))) inline __m512 round_trip16(__m512 x, __m512 scale, const ElementLanes& f) {
  const __m512 v = _mm512_div_ps(x, scale);
  const __m512 m = _mm512_abs_ps(v);
  const __m512 a = _mm512_min_ps(m, f.max_finite);  // m < max ? m : max (NaN: max), as the scalar code
  __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(a), 23), _mm512_set1_epi32(127));
  e = _mm512_max_epi32(e, f.emin);
  const __m512 c = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, f.c_bias), 23));
  const __m512 r = _mm512_sub_ps(_mm512_add_ps(a, c), c);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512 signed_r = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));  // r >= 0: copysign
  return _mm512_mul_ps(signed_r, scale);
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

__attribute__((target("avx512f"))) void mx_round_trip_row_avx512(const float* x, float* y, std::int64_t n,
                                                                 const MxFormat& format, std::int8_t* exponents) {
  QEVAL_CHECK(format.block == 32, "mx_round_trip_row_avx512: blocks of 32 only, got {}", format.block);
  const ElementFormat& f = element_format(format.element);
  const ElementLanes el = element_lanes(f);
  for (std::int64_t begin = 0, b = 0; begin < n; begin += 32, ++b) {
    const std::int64_t len = std::min<std::int64_t>(32, n - begin);
    const __mmask16 m0 = lanes(len), m1 = lanes(std::max<std::int64_t>(0, len - 16));
    const __m512 v0 = _mm512_maskz_loadu_ps(m0, x + begin), v1 = _mm512_maskz_loadu_ps(m1, x + begin + 16);
    const float amax = block_absmax(v0, v1, m0, m1);
    if (std::isnan(amax)) {  // as the portable loop: NaN out, and no exponent to give
      QEVAL_CHECK(!exponents, "MX block {}: a value is NaN, which has no element code", b);
      std::fill(y + begin, y + begin + len, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    if (amax == 0) {
      _mm512_mask_storeu_ps(y + begin, m0, _mm512_setzero_ps());
      _mm512_mask_storeu_ps(y + begin + 16, m1, _mm512_setzero_ps());
      if (exponents) exponents[b] = -127;
      continue;
    }
    const int s = mx_scale_exponent(amax, format);
    if (exponents) exponents[b] = static_cast<std::int8_t>(s);
    const __m512 scale = _mm512_set1_ps(std::ldexp(1.0f, s));
    _mm512_mask_storeu_ps(y + begin, m0, round_trip16(v0, scale, el));
    _mm512_mask_storeu_ps(y + begin + 16, m1, round_trip16(v1, scale, el));
  }
}

__attribute__((target("avx512f"))) void nvfp4_round_trip_avx512(const float* x, float* y, std::int64_t rows,
                                                                std::int64_t K, float amax_t, float* block_scales) {
  const ElementLanes e2m1 = element_lanes(element_format(ElementType::e2m1));
  const float s_tensor = nvfp4_tensor_scale(amax_t);
  const float t = 6.0f * s_tensor;
  const std::int64_t blocks = (K + kNvfp4Block - 1) / kNvfp4Block;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * K;
    float* yr = y + r * K;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t begin = b * kNvfp4Block;
      const __mmask16 m = lanes(K - begin);
      const __m512 v = _mm512_maskz_loadu_ps(m, xr + begin);
      // The portable loop's scalar steps (nvfp4_block_scale), on this block's max.
      const auto [s_block, p] = nvfp4_block_scale(block_absmax(v, _mm512_setzero_ps(), m, 0), t, s_tensor);
      if (block_scales) block_scales[r * blocks + b] = s_block;
      _mm512_mask_storeu_ps(yr + begin, m, p == 0 ? _mm512_setzero_ps() : round_trip16(v, _mm512_set1_ps(p), e2m1));
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
