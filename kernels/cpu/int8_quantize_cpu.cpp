// Fused absmax int8 quantisation of activation rows on the CPU: one pass for each row's
// max |x|, then one pass that divides, rounds half to even, clamps and narrows to int8, both
// split over rows with at::parallel_for. Replaces five ATen passes (abs, amax, div, round,
// clamp + cast) with two reads of x. The round trip (quantise, then dequantise in place: a
// scheme's output quantisation) has the same two passes, the second writing float(q) · s back.
// AVX-512 and AVX2 variants chosen at run time by CPUID (GCC target attribute per function, so
// the binary runs on any x86-64), portable loops otherwise; all produce exactly
// quant/quantize.h's codes and scales (IEEE division, round half to even).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns inside its own AVX-512 intrinsics (_mm512_undefined_* self-initialises).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#define QEVAL_QUANT_HAS_AVX512_VARIANT 1
#endif

#include "kernels/large_tensor.h"
#include "kernels/cpu/int8_quantize_cpu.h"

namespace qeval::kernels::cpu {
namespace {

// Every variant returns NaN when a value is NaN (max alone drops it), so that a scale says
// whether its values were finite: an infinity gives an infinite max, a NaN a NaN one.
float row_absmax_portable(const float* x, std::int64_t K) {
  float m = 0.0f;
  bool nan = false;
  for (std::int64_t k = 0; k < K; ++k) {
    m = std::max(m, std::fabs(x[k]));
    nan |= std::isnan(x[k]);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

void quantize_row_portable(const float* x, std::int64_t K, float s, std::int8_t* q) {
  for (std::int64_t k = 0; k < K; ++k) {
    const float r = std::nearbyint(x[k] / s);  // default rounding mode: half to even
    q[k] = static_cast<std::int8_t>(std::min(127.0f, std::max(-127.0f, r)));
  }
}

// x[k] ← float(q[k]) · s in place, q[k] as quantize_row_portable gives it (through the integer,
// so a code of 0 gives +0 · s as the reference's q.to(float) · s does, never −0).
void round_trip_row_portable(float* x, std::int64_t K, float s) {
  for (std::int64_t k = 0; k < K; ++k) {
    const float r = std::nearbyint(x[k] / s);
    x[k] = static_cast<float>(static_cast<int>(std::min(127.0f, std::max(-127.0f, r)))) * s;
  }
}

#ifdef QEVAL_QUANT_HAS_AVX512_VARIANT
__attribute__((target("avx512f"))) float row_absmax_avx512(const float* x, std::int64_t K) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 nan = 0;
  std::int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m512 v = _mm512_loadu_ps(x + k);
    m = _mm512_max_ps(m, _mm512_abs_ps(v));
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  if (k < K) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (K - k)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + k);
    m = _mm512_max_ps(m, _mm512_abs_ps(v));
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(m);
}

// 16 floats → 16 codes as int32: divide, round half to even, clamp (values are integral and
// within ±127 by then, so the conversions are exact).
__attribute__((target("avx512f"))) inline __m512i codes16_epi32(__m512 v, __m512 s) {
  const __m512 r = _mm512_roundscale_ps(_mm512_div_ps(v, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_set1_ps(127.0f), _mm512_max_ps(_mm512_set1_ps(-127.0f), r)));
}

// The same codes narrowed to int8.
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m128i codes16(__m512 v, __m512 s) {
  return _mm512_cvtepi32_epi8(codes16_epi32(v, s));
}

// `next`: a row of K floats the caller reads next from memory, or null; a cache line of it is
// fetched per 16 codes (see run's one-scale-a-row pass).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize_row_avx512(const float* x, std::int64_t K,
                                                                            float s, std::int8_t* q,
                                                                            const float* next) {
  const __m512 sv = _mm512_set1_ps(s);
  std::int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    if (next) _mm_prefetch(reinterpret_cast<const char*>(next + k), _MM_HINT_T0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), codes16(_mm512_loadu_ps(x + k), sv));
  }
  if (k < K) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (K - k)) - 1u);
    _mm_mask_storeu_epi8(q + k, mask, codes16(_mm512_maskz_loadu_ps(mask, x + k), sv));
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void round_trip_row_avx512(float* x, std::int64_t K, float s) {
  const __m512 sv = _mm512_set1_ps(s);
  std::int64_t k = 0;
  for (; k + 16 <= K; k += 16)
    _mm512_storeu_ps(x + k, _mm512_mul_ps(_mm512_cvtepi32_ps(codes16_epi32(_mm512_loadu_ps(x + k), sv)), sv));
  round_trip_row_portable(x + k, K - k, s);
}

// AVX2: 8 floats a vector; 32 codes a step (four vectors narrowed through two packs, whose
// 128-bit-lane interleaving one vpermd undoes); the tail runs the portable loop.
__attribute__((target("avx2"))) float row_absmax_avx2(const float* x, std::int64_t K) {
  const __m256 no_sign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
  std::int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 v = _mm256_loadu_ps(x + k);
    m = _mm256_max_ps(m, _mm256_and_ps(v, no_sign));
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float r = 0.0f;
  for (float v : lanes) r = std::max(r, v);
  const float tail = row_absmax_portable(x + k, K - k);
  if (_mm256_movemask_ps(nan) != 0 || std::isnan(tail)) return std::numeric_limits<float>::quiet_NaN();
  return std::max(r, tail);
}

__attribute__((target("avx2"))) inline __m256i codes8(__m256 v, __m256 s) {
  const __m256 r = _mm256_round_ps(_mm256_div_ps(v, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_set1_ps(127.0f), _mm256_max_ps(_mm256_set1_ps(-127.0f), r)));
}

__attribute__((target("avx2"))) void quantize_row_avx2(const float* x, std::int64_t K, float s, std::int8_t* q,
                                                       const float* next) {
  const __m256 sv = _mm256_set1_ps(s);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  std::int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    if (next) {
      _mm_prefetch(reinterpret_cast<const char*>(next + k), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(next + k + 16), _MM_HINT_T0);
    }
    const __m256i c0 = codes8(_mm256_loadu_ps(x + k), sv), c1 = codes8(_mm256_loadu_ps(x + k + 8), sv);
    const __m256i c2 = codes8(_mm256_loadu_ps(x + k + 16), sv), c3 = codes8(_mm256_loadu_ps(x + k + 24), sv);
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), _mm256_permutevar8x32_epi32(bytes, order));
  }
  quantize_row_portable(x + k, K - k, s, q + k);
}

__attribute__((target("avx2"))) void round_trip_row_avx2(float* x, std::int64_t K, float s) {
  const __m256 sv = _mm256_set1_ps(s);
  std::int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    _mm256_storeu_ps(x + k, _mm256_mul_ps(_mm256_cvtepi32_ps(codes8(_mm256_loadu_ps(x + k), sv)), sv));
  round_trip_row_portable(x + k, K - k, s);
}
#endif

bool cpu_has_avx2() {
#ifdef QEVAL_QUANT_HAS_AVX512_VARIANT
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512f() {
#ifdef QEVAL_QUANT_HAS_AVX512_VARIANT
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
#else
  return false;
#endif
}

enum class Variant { portable, avx2, avx512 };

float absmax_variant(const float* x, std::int64_t K, Variant variant) {
#ifdef QEVAL_QUANT_HAS_AVX512_VARIANT
  if (variant == Variant::avx512) return row_absmax_avx512(x, K);
  if (variant == Variant::avx2) return row_absmax_avx2(x, K);
#endif
  return row_absmax_portable(x, K);
}

void quantize_row_variant(const float* x, std::int64_t K, float s, std::int8_t* q, Variant variant,
                          const float* next = nullptr) {
#ifdef QEVAL_QUANT_HAS_AVX512_VARIANT
  if (variant == Variant::avx512) return quantize_row_avx512(x, K, s, q, next);
  if (variant == Variant::avx2) return quantize_row_avx2(x, K, s, q, next);
#endif
  quantize_row_portable(x, K, s, q);
}

// quant/quantize.h's int8 absmax scale of a max |x|.
float int8_scale(float amax) { return amax == 0.0f ? 1.0f : amax / 127.0f; }

// Pass 1: each row's max |x|; then each group's scale, as quant/quantize.h computes it.
at::Tensor group_scales(const float* px, std::int64_t M, std::int64_t K, std::int64_t rows_per_scale,
                        Variant variant) {
  const std::int64_t groups = (M + rows_per_scale - 1) / rows_per_scale;
  at::Tensor scales = at::empty({groups}, at::TensorOptions().dtype(at::kFloat));
  std::vector<float> row_max(static_cast<std::size_t>(M));
  at::parallel_for(0, M, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t m = begin; m < end; ++m) row_max[static_cast<std::size_t>(m)] = absmax_variant(px + m * K, K, variant);
  });
  float* ps = scales.data_ptr<float>();
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t r1 = std::min(M, (g + 1) * rows_per_scale);
    float amax = 0.0f;
    for (std::int64_t r = g * rows_per_scale; r < r1; ++r) {
      const float row = row_max[static_cast<std::size_t>(r)];
      amax = std::isnan(row) || std::isnan(amax) ? row + amax : std::max(amax, row);  // a NaN row max stays NaN
    }
    ps[g] = int8_scale(amax);
  }
  return scales;
}

// Pass 2 over every row m with its group's scale: row(m, s).
template <typename RowFn>
void for_each_row(std::int64_t M, std::int64_t rows_per_scale, const at::Tensor& scales, RowFn row) {
  const float* ps = scales.data_ptr<float>();
  at::parallel_for(0, M, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t m = begin; m < end; ++m) row(m, ps[m / rows_per_scale]);
  });
}

Int8Rows run(const at::Tensor& x, std::int64_t rows_per_scale, Variant variant) {
  const std::int64_t M = x.size(0), K = x.size(1);
  const float* px = x.data_ptr<float>();
  // A weight's codes are written once in full: huge pages spare most of their page faults.
  at::Tensor q = empty_written_once({M, K}, at::kChar);
  std::int8_t* pq = q.data_ptr<std::int8_t>();
  if (rows_per_scale == 1) {
    // One scale a row: the row's max and its codes in one pass over memory, the row still in
    // cache for the second read (a 14,336-float row is 56 KiB). While the codes are computed the
    // next row is fetched, so the memory stream does not wait for them (a Llama-3-8B layer's
    // int8-vectorwise weights: 1.9x -> 1.5x a float32 read pass on 1 thread, AVX-512).
    at::Tensor scales = at::empty({M}, at::TensorOptions().dtype(at::kFloat));
    float* ps = scales.data_ptr<float>();
    at::parallel_for(0, M, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t m = begin; m < end; ++m) {
        ps[m] = int8_scale(absmax_variant(px + m * K, K, variant));
        quantize_row_variant(px + m * K, K, ps[m], pq + m * K, variant, m + 1 < M ? px + (m + 1) * K : nullptr);
      }
    });
    return {q, scales};
  }
  Int8Rows out{q, group_scales(px, M, K, rows_per_scale, variant)};
  for_each_row(M, rows_per_scale, out.scales, [&](std::int64_t m, float s) {
    quantize_row_variant(px + m * K, K, s, pq + m * K, variant);
  });
  return out;
}

// One scale for the matrix from its known max |x|: the codes pass alone.
Int8Rows run_with_max_abs(const at::Tensor& x, float max_abs, Variant variant) {
  const std::int64_t M = x.size(0), K = x.size(1);
  const float* px = x.data_ptr<float>();
  at::Tensor q = empty_written_once({M, K}, at::kChar);
  std::int8_t* pq = q.data_ptr<std::int8_t>();
  Int8Rows out{q, at::full({1}, int8_scale(max_abs), at::TensorOptions().dtype(at::kFloat))};
  for_each_row(M, std::max<std::int64_t>(M, 1), out.scales, [&](std::int64_t m, float s) {
    quantize_row_variant(px + m * K, K, s, pq + m * K, variant);
  });
  return out;
}

void round_trip(at::Tensor& x, std::int64_t rows_per_scale, Variant variant) {
  const std::int64_t M = x.size(0), K = x.size(1);
  float* px = x.data_ptr<float>();
  const at::Tensor scales = group_scales(px, M, K, rows_per_scale, variant);
  for_each_row(M, rows_per_scale, scales, [&](std::int64_t m, float s) {
#ifdef QEVAL_QUANT_HAS_AVX512_VARIANT
    if (variant == Variant::avx512) return round_trip_row_avx512(px + m * K, K, s);
    if (variant == Variant::avx2) return round_trip_row_avx2(px + m * K, K, s);
#endif
    round_trip_row_portable(px + m * K, K, s);
  });
}

Variant best_variant() {
  return cpu_has_avx512f() ? Variant::avx512 : cpu_has_avx2() ? Variant::avx2 : Variant::portable;
}

}  // namespace

bool int8_quantize_uses_avx512() { return cpu_has_avx512f(); }

float row_absmax(const float* x, std::int64_t K) {
  static const Variant variant = best_variant();
  return absmax_variant(x, K, variant);
}

float parallel_absmax(const float* x, std::int64_t n) {
  constexpr std::int64_t kChunk = 1 << 16;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<float> chunk_max(static_cast<std::size_t>(chunks), 0.0f);
  at::parallel_for(0, chunks, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      const std::int64_t from = c * kChunk;
      chunk_max[static_cast<std::size_t>(c)] = row_absmax(x + from, std::min(kChunk, n - from));
    }
  });
  float m = 0.0f;
  for (const float c : chunk_max) {
    if (std::isnan(c)) return c;
    m = std::max(m, c);
  }
  return m;
}

bool int8_quantize_avx2_available() { return cpu_has_avx2(); }

Int8Rows quantize_int8_rows_cpu(const at::Tensor& x, std::int64_t rows_per_scale) {
  return run(x, rows_per_scale, best_variant());
}

Int8Rows quantize_int8_matrix_with_max_abs_cpu(const at::Tensor& x, float max_abs) {
  return run_with_max_abs(x, max_abs, best_variant());
}

void fake_quantize_int8_rows_cpu_(at::Tensor& x, std::int64_t rows_per_scale) {
  round_trip(x, rows_per_scale, best_variant());
}

void fake_quantize_int8_rows_portable_(at::Tensor& x, std::int64_t rows_per_scale) {
  round_trip(x, rows_per_scale, Variant::portable);
}

void fake_quantize_int8_rows_avx2_(at::Tensor& x, std::int64_t rows_per_scale) {
  TORCH_CHECK(cpu_has_avx2(), "fake_quantize_int8_rows_: the AVX2 variant needs a CPU with AVX2");
  round_trip(x, rows_per_scale, Variant::avx2);
}

Int8Rows quantize_int8_rows_portable(const at::Tensor& x, std::int64_t rows_per_scale) {
  return run(x, rows_per_scale, Variant::portable);
}

Int8Rows quantize_int8_rows_avx2(const at::Tensor& x, std::int64_t rows_per_scale) {
  TORCH_CHECK(cpu_has_avx2(), "quantize_int8_rows: the AVX2 variant needs a CPU with AVX2");
  return run(x, rows_per_scale, Variant::avx2);
}

}  // namespace qeval::kernels::cpu
