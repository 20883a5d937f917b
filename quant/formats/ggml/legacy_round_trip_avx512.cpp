// llama.cpp's Q8_0 and Q4_0 round trips (quantise as quantize_row_q8_0 / _q4_0, then dequantise),
// fused on AVX-512: a 32-value block in two registers, its scale in scalar float32 as ggml computes
// it, its values straight to float32 with no block struct between. The same bits as
// quant/formats/ggml/legacy_quants.cpp's row functions (tests/quant/ggml_quants_test.cpp holds them to it
// on random rows with ties, zero and constant blocks, −0, fp16 scale edges and non-finite values),
// where those go a value at a time: a Llama-3-8B layer's gguf-q8_0 took 17× a float32 read pass.
// A block holding NaN or infinity takes the row functions (their conversions of such values are
// x86's, which they reproduce).
// Declared in quants_internal.h.

#include <cmath>

#include "quant/formats/ggml/quants.h"
#include "quant/formats/ggml/quants_internal.h"  // also: no FMA contraction (ggml rounds each product)

#if defined(__x86_64__) && defined(__GNUC__)
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 warns inside its own AVX-512 intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#define QEVAL_GGML_LEGACY_AVX512 1
#endif

namespace qeval {

#ifdef QEVAL_GGML_LEGACY_AVX512
namespace {

constexpr int kBlock = 32;

// The reference for one block (a block with NaN or infinity).
template <typename Block>
void reference_block(void (*quantize)(const float*, void*, std::int64_t), void (*dequantize)(const void*, float*, std::int64_t),
                     const float* x, float* y) {
  Block b;
  quantize(x, &b, kBlock);
  dequantize(&b, y, kBlock);
}

// Whether all 32 values are finite (|v| < inf; false for NaN).
__attribute__((target("avx512f"))) inline bool finite32(__m512 a0, __m512 a1) {
  const __m512 inf = _mm512_set1_ps(INFINITY);
  return (_mm512_cmp_ps_mask(a0, inf, _CMP_LT_OQ) & _mm512_cmp_ps_mask(a1, inf, _CMP_LT_OQ)) == 0xFFFF;
}

// ggml's fp32 -> fp16 -> fp32 of a block scale, on every lane: VCVTPS2PH rounds to nearest even,
// as ggml's conversion does for every finite value (subnormal halves and overflow to inf included).
__attribute__((target("avx512f"))) inline __m512 through_fp16(float d) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_set1_ps(d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// ggml_detail::round_half_away_small on 16 lanes, its integer steps: |v| >= 2^23 and NaN give 0;
// otherwise the truncation, plus one away from zero when the exact remainder is at least a half.
__attribute__((target("avx512f"))) inline __m512 round_half_away16(__m512 v) {
  const __mmask16 small = _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(8388608.0f), _CMP_LT_OQ);
  v = _mm512_maskz_mov_ps(small, v);
  const __m512i t = _mm512_cvttps_epi32(v);
  const __m512 r = _mm512_sub_ps(v, _mm512_cvtepi32_ps(t));
  const __m512i one = _mm512_set1_epi32(1);
  __m512i q = _mm512_mask_add_epi32(t, _mm512_cmp_ps_mask(r, _mm512_set1_ps(0.5f), _CMP_GE_OQ), t, one);
  q = _mm512_mask_sub_epi32(q, _mm512_cmp_ps_mask(r, _mm512_set1_ps(-0.5f), _CMP_LE_OQ), q, one);
  return _mm512_cvtepi32_ps(q);  // an integer: 0 is +0, as the int8 code converts
}

// Q8_0: d = amax / 127, id = 1 / d (0 for d = 0), q = roundf(x · id), y = q · fp16(d).
__attribute__((target("avx512f"))) void q8_0_block(const float* x, float* y) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
  if (!finite32(a0, a1)) return reference_block<block_q8_0>(quantize_row_q8_0, dequantize_row_q8_0, x, y);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));  // finite: any order is exact
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m512 vid = _mm512_set1_ps(id), vd = through_fp16(d);
  // |x · id| <= 127 and a little: the codes are int8 without wrapping, as float32 integers.
  _mm512_storeu_ps(y, _mm512_mul_ps(round_half_away16(_mm512_mul_ps(x0, vid)), vd));
  _mm512_storeu_ps(y + 16, _mm512_mul_ps(round_half_away16(_mm512_mul_ps(x1, vid)), vd));
}

// Q4_0's code of 16 values: min(15, (int8_t)(x · id + 8.5)) as x86 converts (cvttps2dq's
// INT32_MIN for NaN and out of range, its low byte as int8), returned as (code − 8) in float32.
// Codes outside 0..15 cannot come from finite values (x · id lies within ±8 and a little, or is
// ±inf / NaN when id overflowed, which converts to 0); `bad` notes one if it did.
__attribute__((target("avx512f"))) inline __m512 q4_0_values16(__m512 x, __m512 vid, __mmask16& bad) {
  const __m512i t = _mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(x, vid), _mm512_set1_ps(8.5f)));
  const __m512i byte = _mm512_srai_epi32(_mm512_slli_epi32(t, 24), 24);
  const __m512i q = _mm512_min_epi32(_mm512_set1_epi32(15), byte);
  bad |= _mm512_cmp_epi32_mask(q, _mm512_setzero_si512(), _MM_CMPINT_LT);
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(8)));
}

// Q4_0: max = the signed value of largest |x| (the first of equal magnitudes; +0 for a zero
// block), d = max / −8, id = 1 / d (0 for d = 0), y = (q − 8) · fp16(d).
__attribute__((target("avx512f"))) void q4_0_block(const float* x, float* y) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
  if (!finite32(a0, a1)) return reference_block<block_q4_0>(quantize_row_q4_0, dequantize_row_q4_0, x, y);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
  float max = 0.0f;
  if (amax != 0.0f) {
    const __m512 vamax = _mm512_set1_ps(amax);
    const std::uint32_t at = static_cast<std::uint32_t>(_mm512_cmp_ps_mask(a0, vamax, _CMP_EQ_OQ)) |
                             static_cast<std::uint32_t>(_mm512_cmp_ps_mask(a1, vamax, _CMP_EQ_OQ)) << 16;
    max = x[__builtin_ctz(at)];
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m512 vid = _mm512_set1_ps(id), vd = through_fp16(d);
  __mmask16 bad = 0;
  const __m512 v0 = q4_0_values16(x0, vid, bad), v1 = q4_0_values16(x1, vid, bad);
  if (bad) return reference_block<block_q4_0>(quantize_row_q4_0, dequantize_row_q4_0, x, y);
  _mm512_storeu_ps(y, _mm512_mul_ps(v0, vd));
  _mm512_storeu_ps(y + 16, _mm512_mul_ps(v1, vd));
}

}  // namespace

void q8_0_round_trip_avx512(const float* x, float* y, std::int64_t n) {
  ggml_detail::check_row(n, kBlock, "q8_0");
  for (std::int64_t i = 0; i < n; i += kBlock) q8_0_block(x + i, y + i);
}

void q4_0_round_trip_avx512(const float* x, float* y, std::int64_t n) {
  ggml_detail::check_row(n, kBlock, "q4_0");
  for (std::int64_t i = 0; i < n; i += kBlock) q4_0_block(x + i, y + i);
}
#else
void q8_0_round_trip_avx512(const float*, float*, std::int64_t) { fail("q8_0_round_trip_avx512: not an x86-64 build"); }
void q4_0_round_trip_avx512(const float*, float*, std::int64_t) { fail("q4_0_round_trip_avx512: not an x86-64 build"); }
#endif

}  // namespace qeval
