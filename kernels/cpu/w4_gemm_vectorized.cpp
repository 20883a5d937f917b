// Vectorised 4-bit weight GEMM for small M (decoding and short windows), where the GEMM is
// bound by reading weights: reading 4-bit codes instead of float32 moves 8× fewer bytes.
// Work is split over output channels with at::parallel_for. Each task dequantises a tile of
// kTileN channels into a float buffer ((q − zero) · scale, bit-identical to w4_dequantize) and
// multiplies it with every row of x, kTileM rows at a time, so each weight is unpacked once per
// call and each loaded weight vector feeds kTileM FMAs. When x has at most kMaxFusedRows rows
// and groups are whole 32-code chunks (per channel, g128, ...), the AVX-512 variant skips the
// buffer: codes go from memory to dequantised registers to FMAs (re-unpacked per 8-row tile).
// Three variants of the same loops: AVX-512F intrinsics, chosen at run time when the CPU has them
// (GCC's target attribute, no global -mavx512f), AVX2 + FMA intrinsics on CPUs without AVX-512
// (buffered path only), and a portable variant with 8 independent lanes that compilers vectorise
// for any x86-64 or other target. Sums run in 16 (or 8) lanes and are
// reduced at the end, so results differ from k-order summation by float rounding only.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns inside its own AVX-512 conversion intrinsics (_mm512_undefined_* self-initialises).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define QEVAL_W4_HAS_AVX512_VARIANT 1
#endif

#include "kernels/cpu/w4_gemm_cpu.h"

namespace qeval::kernels::cpu {
namespace {

constexpr std::int64_t kTileN = 4;  // output channels dequantised together
constexpr std::int64_t kTileM = 4;  // rows of x that share each weight vector
constexpr std::int64_t kMaxFusedRows = 16;  // beyond this the buffered path unpacks fewer times

struct Problem {
  const float* x;  // [M, K]
  const std::uint8_t* q;  // [N, Kb]
  const float* scales;  // [N, G]
  const float* zeros;  // [N, G]
  const float* bias;  // [N] or null
  float* y;  // [M, N]
  std::int64_t M, K, N, Kb, G, group_size;
  std::int64_t ldw;  // buffer row stride: K rounded up to 16, the padding held at 0
};

// ---- portable variant ----------------------------------------------------------------------

// Row n of Ŵ into out[0, K).
void dequantize_row_portable(const Problem& p, std::int64_t n, float* out) {
  const std::uint8_t* codes = p.q + n * p.Kb;
  for (std::int64_t k = 0; k < p.K; ++k)
    out[k] = static_cast<float>((k % 2 == 0) ? (codes[k / 2] & 0x0F) : (codes[k / 2] >> 4));
  for (std::int64_t g = 0; g < p.G; ++g) {
    const float z = p.zeros[n * p.G + g], s = p.scales[n * p.G + g];
    const std::int64_t k1 = std::min(p.K, (g + 1) * p.group_size);
    for (std::int64_t k = g * p.group_size; k < k1; ++k) out[k] = (out[k] - z) * s;
  }
}

void dequantize_tile_portable(const Problem& p, std::int64_t n0, float* buf) {
  for (std::int64_t r = 0; r < kTileN; ++r) {
    float* row = buf + r * p.ldw;
    std::fill(row, row + p.ldw, 0.0f);
    if (n0 + r < p.N) dequantize_row_portable(p, n0 + r, row);
  }
}

void tile_portable(const Problem& p, std::int64_t n0, std::int64_t m0, const float* buf) {
  constexpr int kLanes = 8;
  const float* xr[kTileM];
  for (std::int64_t i = 0; i < kTileM; ++i) xr[i] = p.x + std::min(m0 + i, p.M - 1) * p.K;
  float acc[kTileM][kTileN][kLanes] = {};
  const std::int64_t k_full = p.K / kLanes * kLanes;
  for (std::int64_t k = 0; k < k_full; k += kLanes)
    for (std::int64_t i = 0; i < kTileM; ++i)
      for (std::int64_t j = 0; j < kTileN; ++j)
        for (int l = 0; l < kLanes; ++l) acc[i][j][l] += xr[i][k + l] * buf[j * p.ldw + k + l];
  for (std::int64_t k = k_full; k < p.K; ++k)
    for (std::int64_t i = 0; i < kTileM; ++i)
      for (std::int64_t j = 0; j < kTileN; ++j) acc[i][j][0] += xr[i][k] * buf[j * p.ldw + k];
  for (std::int64_t i = 0; i < kTileM && m0 + i < p.M; ++i)
    for (std::int64_t j = 0; j < kTileN && n0 + j < p.N; ++j) {
      float sum = 0.0f;
      for (int l = 0; l < kLanes; ++l) sum += acc[i][j][l];
      p.y[(m0 + i) * p.N + n0 + j] = p.bias ? sum + p.bias[n0 + j] : sum;
    }
}

// ---- AVX-512F variant ----------------------------------------------------------------------

#ifdef QEVAL_W4_HAS_AVX512_VARIANT
// Row n of Ŵ into out[0, K): writes nothing past K.
__attribute__((target("avx512f"))) void dequantize_row_avx512(const Problem& p, std::int64_t n, float* out) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const std::uint8_t* codes = p.q + n * p.Kb;
  // 16 bytes = 32 codes per step: split nibbles, interleave back into k order, widen to float.
  std::int64_t b = 0;
  for (; b + 16 <= p.K / 2; b += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + b));
    const __m128i lo = _mm_and_si128(bytes, low4);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
    _mm512_storeu_ps(out + 2 * b, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi))));
    _mm512_storeu_ps(out + 2 * b + 16, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi))));
  }
  for (std::int64_t k = 2 * b; k < p.K; ++k)
    out[k] = static_cast<float>((k % 2 == 0) ? (codes[k / 2] & 0x0F) : (codes[k / 2] >> 4));
  for (std::int64_t g = 0; g < p.G; ++g) {
    const __m512 z = _mm512_set1_ps(p.zeros[n * p.G + g]), s = _mm512_set1_ps(p.scales[n * p.G + g]);
    const std::int64_t k1 = std::min(p.K, (g + 1) * p.group_size);
    std::int64_t k = g * p.group_size;
    for (; k + 16 <= k1; k += 16)
      _mm512_storeu_ps(out + k, _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(out + k), z), s));
    if (k < k1) {
      const __mmask16 mask = static_cast<__mmask16>((1u << (k1 - k)) - 1u);
      const __m512 v = _mm512_maskz_loadu_ps(mask, out + k);
      _mm512_mask_storeu_ps(out + k, mask, _mm512_mul_ps(_mm512_sub_ps(v, z), s));
    }
  }
}

__attribute__((target("avx512f"))) void dequantize_tile_avx512(const Problem& p, std::int64_t n0, float* buf) {
  for (std::int64_t r = 0; r < kTileN; ++r) {
    float* row = buf + r * p.ldw;
    std::fill(row, row + p.ldw, 0.0f);
    if (n0 + r < p.N) dequantize_row_avx512(p, n0 + r, row);
  }
}

__attribute__((target("avx512f"))) void tile_avx512(const Problem& p, std::int64_t n0, std::int64_t m0,
                                                    const float* buf) {
  const float* xr[kTileM];
  for (std::int64_t i = 0; i < kTileM; ++i) xr[i] = p.x + std::min(m0 + i, p.M - 1) * p.K;
  __m512 acc[kTileM][kTileN];
  for (auto& a : acc)
    for (auto& v : a) v = _mm512_setzero_ps();
  std::int64_t k = 0;
  for (; k + 16 <= p.K; k += 16) {
    __m512 w[kTileN];
    for (std::int64_t j = 0; j < kTileN; ++j) w[j] = _mm512_loadu_ps(buf + j * p.ldw + k);
    for (std::int64_t i = 0; i < kTileM; ++i) {
      const __m512 xv = _mm512_loadu_ps(xr[i] + k);
      for (std::int64_t j = 0; j < kTileN; ++j) acc[i][j] = _mm512_fmadd_ps(xv, w[j], acc[i][j]);
    }
  }
  if (k < p.K) {  // x is not padded: masked loads never touch memory past row end
    const __mmask16 mask = static_cast<__mmask16>((1u << (p.K - k)) - 1u);
    __m512 w[kTileN];
    for (std::int64_t j = 0; j < kTileN; ++j) w[j] = _mm512_loadu_ps(buf + j * p.ldw + k);
    for (std::int64_t i = 0; i < kTileM; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, xr[i] + k);
      for (std::int64_t j = 0; j < kTileN; ++j) acc[i][j] = _mm512_fmadd_ps(xv, w[j], acc[i][j]);
    }
  }
  for (std::int64_t i = 0; i < kTileM && m0 + i < p.M; ++i)
    for (std::int64_t j = 0; j < kTileN && n0 + j < p.N; ++j) {
      const float sum = _mm512_reduce_add_ps(acc[i][j]);
      p.y[(m0 + i) * p.N + n0 + j] = p.bias ? sum + p.bias[n0 + j] : sum;
    }
}

// Rows m0 .. m0+MT−1 of x against output channels n0 .. n0+NT−1: codes are unpacked, dequantised
// and multiplied in registers, never stored (MT·NT accumulators + 2·NT weight vectors + 2 x
// vectors fit the 32 zmm registers for 4×4 and 8×2). Each 32-code chunk must lie in one group:
// group_size a multiple of 32, or one group per row. Channels past N are computed from channel
// N − 1 and not stored.
template <int MT, int NT>
__attribute__((target("avx512f"))) void fused_tile_avx512(const Problem& p, std::int64_t n0, std::int64_t m0) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const float* xr[MT];
  for (int i = 0; i < MT; ++i) xr[i] = p.x + (m0 + i) * p.K;
  const std::uint8_t* codes[NT];
  const float* sc[NT];
  const float* ze[NT];
  for (int j = 0; j < NT; ++j) {
    const std::int64_t n = std::min(n0 + j, p.N - 1);
    codes[j] = p.q + n * p.Kb, sc[j] = p.scales + n * p.G, ze[j] = p.zeros + n * p.G;
  }
  __m512 acc[MT][NT];
  for (auto& a : acc)
    for (auto& v : a) v = _mm512_setzero_ps();
  const std::int64_t k_full = p.K / 32 * 32;
  for (std::int64_t k = 0; k < k_full; k += 32) {
    const std::int64_t g = p.G == 1 ? 0 : k / p.group_size;
    __m512 w[NT][2];
    for (int j = 0; j < NT; ++j) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[j] + k / 2));
      const __m128i lo = _mm_and_si128(bytes, low4);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
      const __m512 z = _mm512_set1_ps(ze[j][g]), s = _mm512_set1_ps(sc[j][g]);
      w[j][0] = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi))), z), s);
      w[j][1] = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi))), z), s);
    }
    for (int i = 0; i < MT; ++i) {
      const __m512 x0 = _mm512_loadu_ps(xr[i] + k), x1 = _mm512_loadu_ps(xr[i] + k + 16);
      for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_fmadd_ps(x1, w[j][1], _mm512_fmadd_ps(x0, w[j][0], acc[i][j]));
    }
  }
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NT && n0 + j < p.N; ++j) {
      float sum = _mm512_reduce_add_ps(acc[i][j]);
      for (std::int64_t k = k_full; k < p.K; ++k) {  // the last K mod 32 codes, one by one
        const std::int64_t g = k / p.group_size;
        const int code = (k % 2 == 0) ? (codes[j][k / 2] & 0x0F) : (codes[j][k / 2] >> 4);
        sum += xr[i][k] * ((static_cast<float>(code) - ze[j][g]) * sc[j][g]);
      }
      p.y[(m0 + i) * p.N + n0 + j] = p.bias ? sum + p.bias[n0 + j] : sum;
    }
}

// Output channels n0 .. n0+kTileN−1 for every row of x (M ≤ kMaxFusedRows): 4×4 tiles when x
// has at most 4 rows, else tiles of 8 rows × 2 channels.
__attribute__((target("avx512f"))) void fused_channels_avx512(const Problem& p, std::int64_t n0) {
  static_assert(kTileN == 4, "the tile shapes below assume 4-channel tasks");
  switch (p.M) {
    case 1: return fused_tile_avx512<1, 4>(p, n0, 0);
    case 2: return fused_tile_avx512<2, 4>(p, n0, 0);
    case 3: return fused_tile_avx512<3, 4>(p, n0, 0);
    case 4: return fused_tile_avx512<4, 4>(p, n0, 0);
    default: break;
  }
  for (std::int64_t n = n0; n < n0 + kTileN && n < p.N; n += 2) {
    for (std::int64_t m0 = 0; m0 < p.M; m0 += 8) {
      switch (std::min<std::int64_t>(8, p.M - m0)) {
        case 1: fused_tile_avx512<1, 2>(p, n, m0); break;
        case 2: fused_tile_avx512<2, 2>(p, n, m0); break;
        case 3: fused_tile_avx512<3, 2>(p, n, m0); break;
        case 4: fused_tile_avx512<4, 2>(p, n, m0); break;
        case 5: fused_tile_avx512<5, 2>(p, n, m0); break;
        case 6: fused_tile_avx512<6, 2>(p, n, m0); break;
        case 7: fused_tile_avx512<7, 2>(p, n, m0); break;
        default: fused_tile_avx512<8, 2>(p, n, m0); break;
      }
    }
  }
}
#endif

// ---- AVX2 + FMA variant (buffered) ---------------------------------------------------------

#ifdef QEVAL_W4_HAS_AVX512_VARIANT
// Row n of Ŵ into out[0, K), (float(q) − z) · s exactly as the other variants.
__attribute__((target("avx2"))) void dequantize_row_avx2(const Problem& p, std::int64_t n, float* out) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const std::uint8_t* codes = p.q + n * p.Kb;
  std::int64_t b = 0;
  for (; b + 16 <= p.K / 2; b += 16) {  // 16 bytes = 32 codes, back in k order
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + b));
    const __m128i lo = _mm_and_si128(bytes, low4);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
    const __m128i first = _mm_unpacklo_epi8(lo, hi), second = _mm_unpackhi_epi8(lo, hi);
    _mm256_storeu_ps(out + 2 * b, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(first)));
    _mm256_storeu_ps(out + 2 * b + 8, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(first, 8))));
    _mm256_storeu_ps(out + 2 * b + 16, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(second)));
    _mm256_storeu_ps(out + 2 * b + 24, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(second, 8))));
  }
  for (std::int64_t k = 2 * b; k < p.K; ++k)
    out[k] = static_cast<float>((k % 2 == 0) ? (codes[k / 2] & 0x0F) : (codes[k / 2] >> 4));
  for (std::int64_t g = 0; g < p.G; ++g) {
    const float zf = p.zeros[n * p.G + g], sf = p.scales[n * p.G + g];
    const __m256 z = _mm256_set1_ps(zf), s = _mm256_set1_ps(sf);
    const std::int64_t k1 = std::min(p.K, (g + 1) * p.group_size);
    std::int64_t k = g * p.group_size;
    for (; k + 8 <= k1; k += 8) _mm256_storeu_ps(out + k, _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(out + k), z), s));
    for (; k < k1; ++k) out[k] = (out[k] - zf) * sf;
  }
}

__attribute__((target("avx2"))) void dequantize_tile_avx2(const Problem& p, std::int64_t n0, float* buf) {
  for (std::int64_t r = 0; r < kTileN; ++r) {
    float* row = buf + r * p.ldw;
    std::fill(row, row + p.ldw, 0.0f);
    if (n0 + r < p.N) dequantize_row_avx2(p, n0 + r, row);
  }
}

// Two rows of x against the kTileN dequantised channels in buf: 8 accumulators, 4 weight vectors
// and one x vector fit the 16 ymm registers.
__attribute__((target("avx2,fma"))) void tile2_avx2(const Problem& p, std::int64_t n0, std::int64_t m0,
                                                    const float* buf) {
  const float* xr[2] = {p.x + std::min(m0, p.M - 1) * p.K, p.x + std::min(m0 + 1, p.M - 1) * p.K};
  __m256 acc[2][kTileN];
  for (auto& a : acc)
    for (auto& v : a) v = _mm256_setzero_ps();
  std::int64_t k = 0;
  for (; k + 8 <= p.K; k += 8) {
    __m256 w[kTileN];
    for (std::int64_t j = 0; j < kTileN; ++j) w[j] = _mm256_loadu_ps(buf + j * p.ldw + k);
    for (int i = 0; i < 2; ++i) {
      const __m256 xv = _mm256_loadu_ps(xr[i] + k);
      for (std::int64_t j = 0; j < kTileN; ++j) acc[i][j] = _mm256_fmadd_ps(xv, w[j], acc[i][j]);
    }
  }
  for (int i = 0; i < 2 && m0 + i < p.M; ++i)
    for (std::int64_t j = 0; j < kTileN && n0 + j < p.N; ++j) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[i][j]);
      float sum = 0.0f;
      for (float v : lanes) sum += v;
      for (std::int64_t kk = k; kk < p.K; ++kk) sum += xr[i][kk] * buf[j * p.ldw + kk];  // the last K mod 8
      p.y[(m0 + i) * p.N + n0 + j] = p.bias ? sum + p.bias[n0 + j] : sum;
    }
}
#endif

bool cpu_has_avx2_fma() {
#ifdef QEVAL_W4_HAS_AVX512_VARIANT
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512f() {
#ifdef QEVAL_W4_HAS_AVX512_VARIANT
  static const bool has = __builtin_cpu_supports("avx512f");  // libgcc also checks the OS saves ZMM state
  return has;
#else
  return false;
#endif
}

}  // namespace

bool w4_gemm_avx512_available() { return cpu_has_avx512f(); }

std::string w4_gemm_variant() { return cpu_has_avx512f() ? "avx512" : cpu_has_avx2_fma() ? "avx2" : "portable"; }

at::Tensor w4_gemm_vectorized(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                              const at::Tensor& zeros, std::int64_t group_size, const at::Tensor& bias,
                              bool allow_simd) {
  Problem p{};
  p.M = x.size(0), p.K = x.size(1), p.N = qweight.size(0), p.Kb = qweight.size(1), p.G = scales.size(1);
  p.group_size = group_size;
  p.ldw = (p.K + 15) / 16 * 16;
  at::Tensor y = at::empty({p.M, p.N}, x.options());  // [M, N]
  if (p.M == 0 || p.N == 0) return y;
  p.x = x.data_ptr<float>();
  p.q = qweight.data_ptr<std::uint8_t>();
  p.scales = scales.data_ptr<float>();
  p.zeros = zeros.data_ptr<float>();
  p.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  p.y = y.data_ptr<float>();
  const bool avx512 = allow_simd && cpu_has_avx512f();
  const bool avx2 = allow_simd && !avx512 && cpu_has_avx2_fma();
  // Few rows of x and whole 32-code chunks per group: no buffer needed.
  const bool fused = avx512 && p.M <= kMaxFusedRows && (p.G == 1 || p.group_size % 32 == 0);
  const std::int64_t tiles = (p.N + kTileN - 1) / kTileN;
  at::parallel_for(0, tiles, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> buf(fused ? 0 : static_cast<std::size_t>(kTileN * p.ldw));  // [kTileN, ldw]
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t n0 = t * kTileN;
#ifdef QEVAL_W4_HAS_AVX512_VARIANT
      if (fused) {
        fused_channels_avx512(p, n0);
        continue;
      }
      if (avx512) {
        dequantize_tile_avx512(p, n0, buf.data());
        for (std::int64_t m0 = 0; m0 < p.M; m0 += kTileM) tile_avx512(p, n0, m0, buf.data());
        continue;
      }
      if (avx2) {
        dequantize_tile_avx2(p, n0, buf.data());
        for (std::int64_t m0 = 0; m0 < p.M; m0 += 2) tile2_avx2(p, n0, m0, buf.data());
        continue;
      }
#endif
      dequantize_tile_portable(p, n0, buf.data());
      for (std::int64_t m0 = 0; m0 < p.M; m0 += kTileM) tile_portable(p, n0, m0, buf.data());
    }
  });
  return y;
}

at::Tensor w4_dequantize_vectorized(const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros,
                                    std::int64_t K, std::int64_t group_size, bool allow_simd) {
  Problem p{};
  p.K = K, p.N = qweight.size(0), p.Kb = qweight.size(1), p.G = scales.size(1), p.group_size = group_size;
  at::Tensor out = at::empty({p.N, K}, scales.options());  // [N, K]
  if (p.N == 0) return out;
  p.q = qweight.data_ptr<std::uint8_t>();
  p.scales = scales.data_ptr<float>();
  p.zeros = zeros.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const bool avx512 = allow_simd && cpu_has_avx512f();
  const bool avx2 = allow_simd && !avx512 && cpu_has_avx2_fma();
  at::parallel_for(0, p.N, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n) {
#ifdef QEVAL_W4_HAS_AVX512_VARIANT
      if (avx512) {
        dequantize_row_avx512(p, n, po + n * K);
        continue;
      }
      if (avx2) {
        dequantize_row_avx2(p, n, po + n * K);
        continue;
      }
#endif
      dequantize_row_portable(p, n, po + n * K);
    }
  });
  return out;
}

}  // namespace qeval::kernels::cpu
