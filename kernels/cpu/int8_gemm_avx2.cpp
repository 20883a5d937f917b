// Exact int8 GEMM for x86-64 CPUs with AVX2 but without AVX-512 VNNI: acc[m, n] = Σ_k a[m, k] · b[n, k]
// in int32, rounded once to float32 (kernels/cpu/int8_gemm_cpu.h), bit-identical to the reference.
//
// Why it exists: oneDNN is the CPU int8 GEMM of this project (STYLE.md), but without VNNI its JIT
// multiplies with vpmaddubsw on a + 128 and lets the 16-bit pair sums saturate (on an AVX2 EPYC it
// returned -540,673 for a sum of -66,096,768), so the dispatch used float_exact there, slower than
// fp32 itself.
//
// The arithmetic: vpmaddwd on int16. Both operands are widened to int16 when they are packed, so
// each vpmaddwd multiplies a pair of codes of a row of a (broadcast to all lanes) by the same pair
// of codes of 8 columns of b and adds the two products into one int32 lane: 16 products per
// instruction, no 16-bit intermediate to saturate (|a₀b₀ + a₁b₁| ≤ 2 · 128² = 32,768 in int32), any
// int8 code −128 included. The int32 lanes wrap only where the exact sum does not fit either (the
// dispatch refuses K > 133,143), so the final int32 is exact.
//
// Why not vpmaddubsw (the instruction llama.cpp's AVX2 Q8 dot product uses, and this kernel's first
// version): it takes an unsigned operand, so a's sign has to be moved onto b (vpsignb, or b XOR a's
// sign mask with a row correction) for every pair of a row of a and a vector of b. Then a vector of b
// cannot be shared by several rows, and the kernel ran one row at a time, loading b for every 256
// products; measured on Zen 3 it reached a quarter to a half of its ceiling. With int16 operands a
// loaded vector of b serves every row of a micro-tile and a broadcast of a serves every vector of b:
// the classic register-blocked GEMM micro-kernel, as an fp32 GEMM's, with vpmaddwd + vpaddd in place
// of the FMA. Both instructions issue two per cycle on Zen 3 and on Intel cores, and per
// multiply-pipe operation this is 16 products against the FMA's 8, so the ceiling is 2× fp32 (the
// same as vpmaddubsw + vpmaddwd: 32 products for two multiply-pipe operations). Measured in a loop of
// this micro-kernel alone on the Zen 3 EPYC: 25 products per cycle, 1.6× an fp32 FMA loop's 15.5.
//
// Layout and blocking. a is packed once per call into micro-panels of kMr = 6 rows: for each pair of
// k, the 6 rows' (a[2h], a[2h+1]) as int16 pairs (one int32 each), rows past M and k past K zero.
// b is packed once per call into panels of kNr = 16 columns: for each pair of k, 16 int16 pairs
// (two vectors of 8 columns). The micro-kernel computes 6 rows × 16 columns over all of K in 12
// ymm accumulators (lane j of accumulator (r, v) is column 8v + j of row r, so no horizontal sums
// are needed): per pair of k, 2 loads of b, 6 broadcasts of a, 12 × (vpmaddwd, vpaddd). Work goes
// in tiles of rows × 64 columns, rows sized so that the tile's panel of a stays in L2 while its 4
// panels of b pass over it (a panel of b: 16 · K · 2 bytes, 24 KiB at K = 768, read once per
// micro-panel of a from L1 or L2). Threads (at::parallel_for) take whole tiles, each output is the
// sum of one micro-kernel call over all of K, so the integer sums never depend on the thread
// count. Functions carry __attribute__((target("avx2"))) rather than the build using -mavx2, so
// the binary still runs on any x86-64; avx2_int8_gemm_available() says whether this CPU can run it
// (AVX-512BW CPUs without VNNI run this kernel too).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/int8_gemm_cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QEVAL_INT8_HAS_AVX2_VARIANT 1
#endif

namespace qeval::kernels::cpu {

#ifdef QEVAL_INT8_HAS_AVX2_VARIANT
namespace {

constexpr std::int64_t kMr = 6;             // rows per micro-tile (6 × 2 accumulators + 2 b + 1 a = 15 ymm)
constexpr std::int64_t kNr = 16;            // columns per micro-tile and per panel of b
constexpr std::int64_t kNc = 64;            // columns per tile (4 panels of b)
constexpr std::int64_t kL2Budget = 192 << 10;  // bytes of packed a a tile may keep in L2 (Zen 3: 512 KiB per core)

// What happens to float(acc) on the way out: nothing (int8_matmul_acc_avx2), or kernels/int8_gemm.h's
// y = (float(acc) · a_scale[m]) · b_scale[n] + bias[n], each operation rounded on its own (as the
// dispatch's apply_scales: the same bits).
struct Epilogue {
  const float* a_scale = nullptr;  // [M] or [1]; null: no scaling
  bool a_each = false;
  const float* b_scale = nullptr;  // [N] or [1]
  bool b_each = false;
  const float* bias = nullptr;     // [N] or null
};

// acc[r · 16 + j] = Σ over `pairs` pairs of k of row r of the micro-panel `pa` times column j of the
// panel `pb`: the 6 × 16 int32 sums of one micro-tile.
__attribute__((target("avx2"))) void micro_kernel(const std::int32_t* pa, const std::int32_t* pb, std::int64_t pairs,
                                                  std::int32_t* acc) {
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
          c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (std::int64_t h = 0; h < pairs; ++h) {
    const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + h * kNr));
    const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + h * kNr + 8));
    const std::int32_t* ah = pa + h * kMr;
    __m256i a;
#define QEVAL_ROW(r)                                            \
  a = _mm256_set1_epi32(ah[r]);                                 \
  c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(a, b0)); \
  c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(a, b1));
    QEVAL_ROW(0)
    QEVAL_ROW(1)
    QEVAL_ROW(2)
    QEVAL_ROW(3)
    QEVAL_ROW(4)
    QEVAL_ROW(5)
#undef QEVAL_ROW
    // Keeps GCC from spilling accumulators to the stack inside the loop.
    asm("" : "+x"(c00), "+x"(c01), "+x"(c10), "+x"(c11), "+x"(c20), "+x"(c21), "+x"(c30), "+x"(c31), "+x"(c40),
        "+x"(c41), "+x"(c50), "+x"(c51));
  }
  const __m256i sums[2 * kMr] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
  for (std::int64_t i = 0; i < 2 * kMr; ++i) _mm256_store_si256(reinterpret_cast<__m256i*>(acc) + i, sums[i]);
}

// out[0 .. cols) of row m, columns n0 .. n0 + cols: float(acc), exact int32 → float32 rounded to
// nearest like the reference's cast, then the epilogue.
__attribute__((target("avx2"))) void store_row(const std::int32_t* acc, const Epilogue& ep, std::int64_t m,
                                               std::int64_t n0, float* out, std::int64_t cols) {
  __m256 lo = _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(acc)));
  __m256 hi = _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(acc + 8)));
  if (ep.a_scale != nullptr) {
    const __m256 sa = _mm256_set1_ps(ep.a_scale[ep.a_each ? m : 0]);
    lo = _mm256_mul_ps(lo, sa);
    hi = _mm256_mul_ps(hi, sa);
    __m256 sb_lo, sb_hi, bias_lo = _mm256_setzero_ps(), bias_hi = _mm256_setzero_ps();
    if (cols == kNr) {
      sb_lo = ep.b_each ? _mm256_loadu_ps(ep.b_scale + n0) : _mm256_set1_ps(ep.b_scale[0]);
      sb_hi = ep.b_each ? _mm256_loadu_ps(ep.b_scale + n0 + 8) : sb_lo;
      if (ep.bias != nullptr) {
        bias_lo = _mm256_loadu_ps(ep.bias + n0);
        bias_hi = _mm256_loadu_ps(ep.bias + n0 + 8);
      }
    } else {  // the last panel: columns past N repeat the last one and are never stored
      alignas(32) float sb[kNr], bias[kNr];
      for (std::int64_t j = 0; j < kNr; ++j) {
        const std::int64_t n = n0 + std::min(j, cols - 1);
        sb[j] = ep.b_scale[ep.b_each ? n : 0];
        bias[j] = ep.bias != nullptr ? ep.bias[n] : 0.0f;
      }
      sb_lo = _mm256_load_ps(sb), sb_hi = _mm256_load_ps(sb + 8);
      bias_lo = _mm256_load_ps(bias), bias_hi = _mm256_load_ps(bias + 8);
    }
    lo = _mm256_mul_ps(lo, sb_lo);
    hi = _mm256_mul_ps(hi, sb_hi);
    if (ep.bias != nullptr) {
      lo = _mm256_add_ps(lo, bias_lo);
      hi = _mm256_add_ps(hi, bias_hi);
    }
  }
  if (cols == kNr) {
    _mm256_storeu_ps(out, lo);
    _mm256_storeu_ps(out + 8, hi);
  } else {
    alignas(32) float tmp[kNr];
    _mm256_store_ps(tmp, lo);
    _mm256_store_ps(tmp + 8, hi);
    std::memcpy(out, tmp, static_cast<std::size_t>(cols) * sizeof(float));
  }
}

// One int32 holding the int16 pair (lo, hi): lo in the low half, as vpmaddwd reads it.
inline std::int32_t int16_pair(std::int8_t lo, std::int8_t hi) {
  return static_cast<std::int32_t>(static_cast<std::uint16_t>(static_cast<std::int16_t>(lo)) |
                                   (static_cast<std::uint32_t>(static_cast<std::uint16_t>(static_cast<std::int16_t>(hi)))
                                    << 16));
}

// r[i] lane j → r[j] lane i: the 8 × 8 transpose of int32 lanes (unpack 32, unpack 64, swap halves).
__attribute__((target("avx2"))) inline void transpose_8x8_epi32(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);      // rows i, i+1 of columns 0, 1 | 4, 5
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);  // columns 2, 3 | 6, 7
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);          // rows i..i+3 of column 0 | 4
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);      // column 1 | 5
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);  // column 2 | 6
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);  // column 3 | 7
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2x128_si256(u[c], u[c + 4], 0x20);
    r[c + 4] = _mm256_permute2x128_si256(u[c], u[c + 4], 0x31);
  }
}

// Rows [r0, r0 + rows) of x [R, K] as `width` interleaved lanes of int16 pairs: dst[h · width + i] =
// (x[r0 + i][2h], x[r0 + i][2h + 1]) for h < pairs, zeros past K and for i ≥ rows. Used for a's
// micro-panels (width 6) and b's panels (width 16). The pairs of whole 16-byte runs of k go 8 rows
// at a time through registers: each row's 16 codes widened to 8 int16 pairs, an 8 × 8 transpose,
// one store per pair of k (masked to 6 lanes for a's panels). Element by element (a strided
// scalar store per pair) the kernel ran 44.7 M instructions outside its micro-kernel at SmolLM2's
// four shapes with M = 512, now 29.6 M, of 634 M in all (callgrind, gemm_bench on one thread).
__attribute__((target("avx2"))) void pack_pairs(const std::int8_t* x, std::int64_t K, std::int64_t r0,
                                                std::int64_t rows, std::int64_t width, std::int64_t pairs,
                                                std::int32_t* dst) {
  if (rows < width) std::memset(dst, 0, static_cast<std::size_t>(pairs * width) * sizeof(std::int32_t));
  const std::int64_t runs = K / 16;  // whole 16-byte runs: 8 pairs each
  for (std::int64_t i0 = 0; i0 < width; i0 += 8) {
    const std::int64_t lanes = std::min<std::int64_t>(8, width - i0);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (std::int64_t run = 0; run < runs; ++run) {
      __m256i r[8];
      for (std::int64_t i = 0; i < 8; ++i)
        r[i] = i0 + i < rows ? _mm256_cvtepi8_epi16(_mm_loadu_si128(
                                   reinterpret_cast<const __m128i*>(x + (r0 + i0 + i) * K + run * 16)))
                             : _mm256_setzero_si256();
      transpose_8x8_epi32(r);
      std::int32_t* d = dst + run * 8 * width + i0;
      for (std::int64_t h = 0; h < 8; ++h) {
        if (lanes == 8)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + h * width), r[h]);
        else
          _mm256_maskstore_epi32(reinterpret_cast<int*>(d + h * width), mask, r[h]);
      }
    }
  }
  const std::int64_t full = K / 2;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int8_t* src = x + (r0 + i) * K;
    std::int32_t* d = dst + i;
    for (std::int64_t h = runs * 8; h < full; ++h) d[h * width] = int16_pair(src[2 * h], src[2 * h + 1]);
    if (K % 2 != 0) d[full * width] = int16_pair(src[K - 1], 0);
  }
}

// Rows of a per tile: micro-panels of a whose packed bytes fit kL2Budget, at least one, at most 16.
std::int64_t tile_rows(std::int64_t pairs) {
  const std::int64_t panel_bytes = kMr * pairs * static_cast<std::int64_t>(sizeof(std::int32_t));
  return kMr * std::clamp<std::int64_t>(kL2Budget / panel_bytes, 1, 16);
}

}  // namespace
#endif

bool avx2_int8_gemm_available() {
#ifdef QEVAL_INT8_HAS_AVX2_VARIANT
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

namespace {

// The whole product for a [M, K] and b [N, K], contiguous int8, with `ep` applied as tiles are stored.
at::Tensor run(const at::Tensor& a, const at::Tensor& b, const Epilogue& ep) {
  TORCH_CHECK(avx2_int8_gemm_available(), "int8_gemm: the avx2 backend needs a CPU with AVX2");
  const std::int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  at::Tensor out_t = at::empty({M, N}, at::TensorOptions().dtype(at::kFloat));  // [M, N]
  if (M == 0 || N == 0) return out_t;
#ifdef QEVAL_INT8_HAS_AVX2_VARIANT
  const std::int8_t* pa = a.data_ptr<std::int8_t>();
  const std::int8_t* pb = b.data_ptr<std::int8_t>();
  const std::int64_t pairs = (K + 1) / 2;
  const std::int64_t micro_panels = (M + kMr - 1) / kMr, panels = (N + kNr - 1) / kNr;
  // Packed operands, 64-byte aligned by LibTorch's allocator: a as [micro_panels][pairs][6], b as
  // [panels][pairs][16], int16 pairs.
  at::Tensor packed_a = at::empty({micro_panels * pairs * kMr}, at::TensorOptions().dtype(at::kInt));
  at::Tensor packed_b = at::empty({panels * pairs * kNr}, at::TensorOptions().dtype(at::kInt));
  std::int32_t* pap = packed_a.data_ptr<std::int32_t>();
  std::int32_t* pbp = packed_b.data_ptr<std::int32_t>();
  at::parallel_for(0, micro_panels, 8, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p)
      pack_pairs(pa, K, p * kMr, std::min(kMr, M - p * kMr), kMr, pairs, pap + p * pairs * kMr);
  });
  at::parallel_for(0, panels, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p)
      pack_pairs(pb, K, p * kNr, std::min(kNr, N - p * kNr), kNr, pairs, pbp + p * pairs * kNr);
  });
  // Tiles of a row block × kNc columns, row blocks outermost: a thread's consecutive tiles share
  // their rows of a. As few row blocks as the L2 budget allows, the micro-panels spread evenly over
  // them (block i: micro-panels [P · i / blocks, P · (i + 1) / blocks)). at::parallel_for gives
  // every thread the same number of tiles, so blocks of equal height keep the threads equally
  // busy: with full blocks of 96 rows and the remainder last, M = 512 made blocks 5 × 96 + 32, and
  // on 2 threads the one with the short block idled a fifth of every GEMM.
  float* out = out_t.data_ptr<float>();
  const std::int64_t panels_per_block = tile_rows(pairs) / kMr;
  const std::int64_t row_blocks = (micro_panels + panels_per_block - 1) / panels_per_block;
  const std::int64_t col_blocks = (N + kNc - 1) / kNc;
  at::parallel_for(0, row_blocks * col_blocks, 1, [&](std::int64_t t_begin, std::int64_t t_end) {
    alignas(32) std::int32_t acc[kMr * kNr];
    for (std::int64_t t = t_begin; t < t_end; ++t) {
      const std::int64_t block = t / col_blocks;
      const std::int64_t m_begin = kMr * (micro_panels * block / row_blocks);
      const std::int64_t m_end = std::min(M, kMr * (micro_panels * (block + 1) / row_blocks));
      const std::int64_t n_begin = (t % col_blocks) * kNc, n_end = std::min(N, n_begin + kNc);
      for (std::int64_t n0 = n_begin; n0 < n_end; n0 += kNr) {
        const std::int32_t* panel = pbp + (n0 / kNr) * pairs * kNr;
        const std::int64_t cols = std::min(kNr, N - n0);
        for (std::int64_t m0 = m_begin; m0 < m_end; m0 += kMr) {
          micro_kernel(pap + (m0 / kMr) * pairs * kMr, panel, pairs, acc);
          for (std::int64_t r = 0; r < std::min(kMr, M - m0); ++r)
            store_row(acc + r * kNr, ep, m0 + r, n0, out + (m0 + r) * N + n0, cols);
        }
      }
    }
  });
#endif
  return out_t;
}

}  // namespace

at::Tensor int8_matmul_acc_avx2(const at::Tensor& a, const at::Tensor& b) { return run(a, b, Epilogue{}); }

at::Tensor int8_gemm_avx2(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                          const at::Tensor& b_scale, const at::Tensor& bias) {
  Epilogue ep;
  ep.a_scale = a_scale.data_ptr<float>();
  ep.a_each = a_scale.numel() != 1;
  ep.b_scale = b_scale.data_ptr<float>();
  ep.b_each = b_scale.numel() != 1;
  ep.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  return run(a, b, ep);
}

}  // namespace qeval::kernels::cpu
