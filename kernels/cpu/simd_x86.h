// The vector operations of qeval's x86 kernels with two variants of one source: AVX2 + FMA (8 float
// lanes, Avx2Ops) and AVX-512 (16 lanes, Avx512Ops). A kernel's source is written once against S
// (one of these) and QEVAL_SIMD (the function attribute naming the variant's instruction set), and
// included once per variant (kernels/cpu/fused_attention_x86.cpp, kernels/cpu/vocab_rows_x86.cpp).
// Functions carry __attribute__((target)) rather than the build using -mavx2 -mfma, so the binary
// still runs on any x86-64; kernels/cpu/cpu_isa.h says which variant this CPU runs.
#pragma once

#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), a self-initialised variable that
// -Wmaybe-uninitialized and -Wuninitialized report once they are inlined (GCC bug 105593, fixed in
// GCC 13); the warning's location is in the intrinsics' header, so this pragma silences it.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define QEVAL_HAS_X86_VARIANTS 1
#define QEVAL_AVX2_FMA __attribute__((target("avx2,fma")))
#define QEVAL_AVX512 __attribute__((target("avx512f,avx512dq,avx2,fma")))

namespace qeval::kernels::cpu::simd {

// The vector operations of the AVX2 variant: 8 lanes, masks as lanes of all ones.
struct Avx2Ops {
  using V = __m256;
  using Mask = __m256i;
  static constexpr std::int64_t W = 8;
  QEVAL_AVX2_FMA static V zero() { return _mm256_setzero_ps(); }
  QEVAL_AVX2_FMA static V set1(float x) { return _mm256_set1_ps(x); }
  QEVAL_AVX2_FMA static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  QEVAL_AVX2_FMA static void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  QEVAL_AVX2_FMA static V broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  QEVAL_AVX2_FMA static V add(V a, V b) { return _mm256_add_ps(a, b); }
  QEVAL_AVX2_FMA static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  QEVAL_AVX2_FMA static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  QEVAL_AVX2_FMA static V div(V a, V b) { return _mm256_div_ps(a, b); }
  QEVAL_AVX2_FMA static V min(V a, V b) { return _mm256_min_ps(a, b); }
  QEVAL_AVX2_FMA static V max(V a, V b) { return _mm256_max_ps(a, b); }
  QEVAL_AVX2_FMA static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  QEVAL_AVX2_FMA static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  QEVAL_AVX2_FMA static V round_nearest(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-127, 127], through the exponent field.
  QEVAL_AVX2_FMA static V pow2(V n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  // v, with 0 in the lanes where x < lo (false for NaN).
  QEVAL_AVX2_FMA static V zero_where_less(V x, V lo, V v) { return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), v); }
  // Lanes [0, n) set, n < 8.
  QEVAL_AVX2_FMA static Mask first_lanes(std::int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  QEVAL_AVX2_FMA static V mask_load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  QEVAL_AVX2_FMA static void mask_store(float* p, Mask m, V v) { _mm256_maskstore_ps(p, m, v); }
  QEVAL_AVX2_FMA static V keep_lanes(Mask m, V v) { return _mm256_and_ps(v, _mm256_castsi256_ps(m)); }
  // The lanes' sum in a fixed order.
  QEVAL_AVX2_FMA static float lane_sum(V x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  QEVAL_AVX2_FMA static float lane_max(V x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  }
  QEVAL_AVX2_FMA static float first_lane(V x) { return _mm256_cvtss_f32(x); }
  // Bit i set where lane i of a equals lane i of b (false for NaN).
  QEVAL_AVX2_FMA static unsigned equal_lanes(V a, V b) {
    return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)));
  }
  // Eight float64 sums, sum k taking the elements whose index is k mod 8.
  struct Lanes8 {
    __m256d lo, hi;
  };
  QEVAL_AVX2_FMA static Lanes8 lanes8_zero() { return {_mm256_setzero_pd(), _mm256_setzero_pd()}; }
  // The 8 lanes of x (elements 8j … 8j + 7 of a row) added, each to its sum.
  QEVAL_AVX2_FMA static void add_to_lanes8(Lanes8& s, V x) {
    s.lo = _mm256_add_pd(s.lo, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    s.hi = _mm256_add_pd(s.hi, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
  }
  QEVAL_AVX2_FMA static void store_lanes8(double* out, const Lanes8& s) {
    _mm256_storeu_pd(out, s.lo);
    _mm256_storeu_pd(out + 4, s.hi);
  }
};

// The vector operations of the AVX-512 variant: 16 lanes, masks as mask registers.
struct Avx512Ops {
  using V = __m512;
  using Mask = __mmask16;
  static constexpr std::int64_t W = 16;
  QEVAL_AVX512 static V zero() { return _mm512_setzero_ps(); }
  QEVAL_AVX512 static V set1(float x) { return _mm512_set1_ps(x); }
  QEVAL_AVX512 static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  QEVAL_AVX512 static void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  QEVAL_AVX512 static V broadcast(const float* p) { return _mm512_set1_ps(*p); }
  QEVAL_AVX512 static V add(V a, V b) { return _mm512_add_ps(a, b); }
  QEVAL_AVX512 static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  QEVAL_AVX512 static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  QEVAL_AVX512 static V div(V a, V b) { return _mm512_div_ps(a, b); }
  QEVAL_AVX512 static V min(V a, V b) { return _mm512_min_ps(a, b); }
  QEVAL_AVX512 static V max(V a, V b) { return _mm512_max_ps(a, b); }
  QEVAL_AVX512 static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  QEVAL_AVX512 static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  QEVAL_AVX512 static V round_nearest(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  QEVAL_AVX512 static V pow2(V n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  QEVAL_AVX512 static V zero_where_less(V x, V lo, V v) { return _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), v); }
  QEVAL_AVX512 static Mask first_lanes(std::int64_t n) { return static_cast<Mask>((1u << n) - 1u); }
  QEVAL_AVX512 static V mask_load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  QEVAL_AVX512 static void mask_store(float* p, Mask m, V v) { _mm512_mask_storeu_ps(p, m, v); }
  QEVAL_AVX512 static V keep_lanes(Mask m, V v) { return _mm512_maskz_mov_ps(m, v); }
  // Lanes 8 … 15.
  QEVAL_AVX512 static __m256 upper_half(V x) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)); }
  // The two halves added, then the AVX2 order.
  QEVAL_AVX512 static float lane_sum(V x) {
    return Avx2Ops::lane_sum(_mm256_add_ps(_mm512_castps512_ps256(x), upper_half(x)));
  }
  QEVAL_AVX512 static float lane_max(V x) {
    return Avx2Ops::lane_max(_mm256_max_ps(_mm512_castps512_ps256(x), upper_half(x)));
  }
  QEVAL_AVX512 static float first_lane(V x) { return _mm512_cvtss_f32(x); }
  QEVAL_AVX512 static unsigned equal_lanes(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  using Lanes8 = __m512d;
  QEVAL_AVX512 static Lanes8 lanes8_zero() { return _mm512_setzero_pd(); }
  // Elements 16j … 16j + 7, then 16j + 8 … 16j + 15: the order of the AVX2 variant's two steps.
  QEVAL_AVX512 static void add_to_lanes8(Lanes8& s, V x) {
    s = _mm512_add_pd(s, _mm512_cvtps_pd(_mm512_castps512_ps256(x)));
    s = _mm512_add_pd(s, _mm512_cvtps_pd(upper_half(x)));
  }
  QEVAL_AVX512 static void store_lanes8(double* out, const Lanes8& s) { _mm512_storeu_pd(out, s); }
};

}  // namespace qeval::kernels::cpu::simd

#endif
