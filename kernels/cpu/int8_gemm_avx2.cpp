// Exact int8 GEMM for x86-64 CPUs with AVX2 but without AVX-512 VNNI: acc[m, n] = Σ_k a[m, k] · b[n, k]
// in int32, rounded once to float32 (kernels/cpu/int8_gemm_cpu.h), bit-identical to the reference.
//
// Why it exists: oneDNN is the CPU int8 GEMM of this project (STYLE.md), but without VNNI its JIT
// multiplies with vpmaddubsw on a + 128 and lets the 16-bit pair sums saturate (on an AVX2 EPYC it
// returned -540,673 for a sum of -66,096,768), so the dispatch used float_exact there, slower than
// fp32 itself. This kernel uses the same instruction in a way that cannot saturate.
//
// The arithmetic. vpmaddubsw multiplies unsigned bytes by signed bytes and adds adjacent pairs into
// saturating int16; vpmaddwd against ones widens those pairs into int32 lanes. The unsigned operand
// is |a|, so b must carry a's sign. llama.cpp's AVX2 Q8 dot product applies it with vpsignb; on
// Zen 3 vpsignb issues on the same two pipes as the two multiplies (measured: 24 multiply-pipe
// operations per 256 products, 1.5× fp32 at best). Here the sign costs a vpxor, which any vector
// ALU pipe takes: for a < 0 the kernel multiplies |a| by ~b = −b − 1 (b XOR 0xFF) instead of −b,
// which is a·b − |a|, and adds the row's Σ_{a<0} |a| back at the end (one int32 per row):
//   Σ_k a·b = Σ_k |a| · (b XOR mask(a)) + Σ_{k: a<0} |a|,   mask(a) = 0xFF if a < 0 else 0.
// Every 16-bit pair sum |a₀|·s₀ + |a₁|·s₁ with |a| ≤ 127 and s ∈ [−128, 127] lies within ±32,512,
// inside int16, so nothing saturates; the int32 sums wrap only where the exact result does not fit
// either (K > 133,143 is refused by the dispatch), so the final int32 is exact. b may hold any int8
// (−128 too); a must not hold −128 (|−128| · 128 · 2 saturates): the quantisers never produce it,
// and an a that holds it goes to float_exact (still exact), found while a is packed.
//
// Layout and blocking: a is packed once per call to |a| and its sign mask, rows padded with zeros to
// Kp (a multiple of 16), plus the per-row correction. b is packed once per call in panels of 16
// output columns: for each block of 16 k, 8 vectors of 32 bytes, vector j holding column j's 16
// codes in its low half and column j + 8's in its high half (N · Kp bytes in all; O(NK) against
// the GEMM's O(MNK)). Work goes in tiles of 64 rows × 16 columns, k in slices of 1024 (16 KiB of b,
// held in L1 while the tile's rows pass over it). The micro-kernel
// takes one row: each block of 16 k is one 128-bit broadcast of |a| and one of the mask, then 8 ×
// (vpxor, vpmaddubsw, vpmaddwd, vpaddd) for 256 products; a final vphaddd tree puts the 16 columns in
// order. Threads (at::parallel_for) take whole tiles, so the integer sums never depend on the
// thread count. Functions carry __attribute__((target("avx2"))) rather than the
// build using -mavx2, so the binary still runs on any x86-64; avx2_int8_gemm_available() says
// whether this CPU can run it (AVX-512BW CPUs without VNNI run this kernel too).
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>

#include "kernels/cpu/int8_gemm_cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QEVAL_INT8_HAS_AVX2_VARIANT 1
#endif

namespace qeval::kernels::cpu {

#ifdef QEVAL_INT8_HAS_AVX2_VARIANT
namespace {

constexpr std::int64_t kNr = 16;    // output columns per panel
constexpr std::int64_t kKb = 16;    // k per block (one 128-bit broadcast)
constexpr std::int64_t kKc = 1024;  // k per panel slice a tile's rows share: 16 · 1024 bytes = 16 KiB
constexpr std::int64_t kMb = 64;    // rows per tile

std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

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

// (lo, hi) = columns 0..7 and 8..15 of Σ over `blocks` blocks of 16 k of |a| · (b XOR mask), one row.
__attribute__((target("avx2"))) inline void row_kernel(const std::int8_t* ua, const std::int8_t* ma,
                                                       const std::int8_t* panel, std::int64_t blocks, __m256i& lo,
                                                       __m256i& hi) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  for (std::int64_t g = 0; g < blocks; ++g) {
    const __m256i* bp = reinterpret_cast<const __m256i*>(panel + g * kKb * kNr);
    const __m256i u = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ua + g * kKb)));
    const __m256i m = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ma + g * kKb)));
#define QEVAL_STEP(j) \
  c##j = _mm256_add_epi32(c##j, _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_xor_si256(_mm256_load_si256(bp + j), m)), ones))
    QEVAL_STEP(0);
    QEVAL_STEP(1);
    QEVAL_STEP(2);
    QEVAL_STEP(3);
    QEVAL_STEP(4);
    QEVAL_STEP(5);
    QEVAL_STEP(6);
    QEVAL_STEP(7);
#undef QEVAL_STEP
    // Keeps GCC 12 from spilling accumulators to the stack inside the loop (measured: 10 % slower).
    asm("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6), "+x"(c7));
  }
  // c_j: low half 4 partial sums of column j, high half of column j + 8.
  const __m256i q0 = _mm256_hadd_epi32(_mm256_hadd_epi32(c0, c1), _mm256_hadd_epi32(c2, c3));  // [0..3 | 8..11]
  const __m256i q1 = _mm256_hadd_epi32(_mm256_hadd_epi32(c4, c5), _mm256_hadd_epi32(c6, c7));  // [4..7 | 12..15]
  lo = _mm256_permute2x128_si256(q0, q1, 0x20);
  hi = _mm256_permute2x128_si256(q0, q1, 0x31);
}

// out[0 .. cols) for row m, columns n0 .. n0 + cols: float(lo, hi + c), exact int32 → float32 rounded
// to nearest like the reference's cast, then the epilogue.
__attribute__((target("avx2"))) inline void store_row(__m256i lo, __m256i hi, std::int32_t c, const Epilogue& ep,
                                                      std::int64_t m, std::int64_t n0, float* out, std::int64_t cols) {
  const __m256i cv = _mm256_set1_epi32(c);
  __m256 flo = _mm256_cvtepi32_ps(_mm256_add_epi32(lo, cv)), fhi = _mm256_cvtepi32_ps(_mm256_add_epi32(hi, cv));
  if (ep.a_scale != nullptr) {
    const __m256 sa = _mm256_set1_ps(ep.a_scale[ep.a_each ? m : 0]);
    flo = _mm256_mul_ps(flo, sa);
    fhi = _mm256_mul_ps(fhi, sa);
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
    flo = _mm256_mul_ps(flo, sb_lo);
    fhi = _mm256_mul_ps(fhi, sb_hi);
    if (ep.bias != nullptr) {
      flo = _mm256_add_ps(flo, bias_lo);
      fhi = _mm256_add_ps(fhi, bias_hi);
    }
  }
  if (cols == kNr) {
    _mm256_storeu_ps(out, flo);
    _mm256_storeu_ps(out + 8, fhi);
  } else {
    alignas(32) float tmp[kNr];
    _mm256_store_ps(tmp, flo);
    _mm256_store_ps(tmp + 8, fhi);
    std::memcpy(out, tmp, static_cast<std::size_t>(cols) * sizeof(float));
  }
}

// One tile: rows [m0, m0 + rows) × the 16 columns of panel `panel` (all Kp), into out [M, N] float32.
// With K ≤ kKc each row runs once over the whole panel and is stored directly; longer K goes in
// slices, each held in L1 while every row of the tile passes over it, the int32 sums in `sums`.
__attribute__((target("avx2"))) void run_tile(const std::int8_t* ua, const std::int8_t* ma, const std::int32_t* corr,
                                              std::int64_t Kp, const std::int8_t* panel, std::int64_t m0,
                                              std::int64_t rows, std::int64_t n0, std::int64_t cols,
                                              const Epilogue& ep, float* out, std::int64_t N, std::int32_t* sums) {
  __m256i lo, hi;
  if (Kp <= kKc) {
    for (std::int64_t r = 0; r < rows; ++r) {
      row_kernel(ua + r * Kp, ma + r * Kp, panel, Kp / kKb, lo, hi);
      store_row(lo, hi, corr[r], ep, m0 + r, n0, out + r * N, cols);
    }
    return;
  }
  for (std::int64_t k0 = 0; k0 < Kp; k0 += kKc) {
    const std::int64_t kc = std::min(kKc, Kp - k0);
    for (std::int64_t r = 0; r < rows; ++r) {
      row_kernel(ua + r * Kp + k0, ma + r * Kp + k0, panel + k0 * kNr, kc / kKb, lo, hi);
      __m256i* s = reinterpret_cast<__m256i*>(sums + r * kNr);
      if (k0 > 0) {
        lo = _mm256_add_epi32(lo, _mm256_load_si256(s));
        hi = _mm256_add_epi32(hi, _mm256_load_si256(s + 1));
      }
      if (k0 + kc < Kp) {
        _mm256_store_si256(s, lo);
        _mm256_store_si256(s + 1, hi);
      } else {
        store_row(lo, hi, corr[r], ep, m0 + r, n0, out + r * N, cols);
      }
    }
  }
}

// Columns [n0, n0 + 16) and k [k0, k0 + kc) of b [N, K] into `slice` (kc / 16 blocks of 256 bytes),
// zeros past K and past N.
void pack_slice(const std::int8_t* b, std::int64_t N, std::int64_t K, std::int64_t n0, std::int64_t k0,
                std::int64_t kc, std::int8_t* slice) {
  const std::int64_t cols = std::min(kNr, N - n0), kvalid = std::min(kc, K - k0);
  if (cols < kNr || kvalid < kc) std::memset(slice, 0, static_cast<std::size_t>(kc * kNr));
  for (std::int64_t c = 0; c < cols; ++c) {
    const std::int8_t* row = b + (n0 + c) * K + k0;
    std::int8_t* dst = slice + (c % 8) * 32 + (c / 8) * 16;
    std::int64_t k = 0;
    for (; k + kKb <= kvalid; k += kKb) std::memcpy(dst + k * kNr, row + k, kKb);
    if (k < kvalid) std::memcpy(dst + k * kNr, row + k, static_cast<std::size_t>(kvalid - k));
  }
}

// Rows [m_begin, m_end) of a [M, K] into |a| and mask [M, Kp] (zero padded) and corr[m] = Σ_{a<0} |a|.
// Returns false when a row holds −128.
__attribute__((target("avx2"))) bool pack_rows(const std::int8_t* a, std::int64_t K, std::int64_t Kp,
                                               std::int64_t m_begin, std::int64_t m_end, std::int8_t* ua,
                                               std::int8_t* ma, std::int32_t* corr) {
  const __m256i lowest = _mm256_set1_epi8(-128), zero = _mm256_setzero_si256();
  for (std::int64_t m = m_begin; m < m_end; ++m) {
    const std::int8_t* src = a + m * K;
    std::int8_t* u = ua + m * Kp;
    std::int8_t* mk = ma + m * Kp;
    __m256i hit = zero, neg_sum = zero;  // neg_sum: int64 lanes of Σ |a| over a < 0 (vpsadbw)
    std::int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k));
      const __m256i mask = _mm256_cmpgt_epi8(zero, v);
      const __m256i abs = _mm256_abs_epi8(v);
      hit = _mm256_or_si256(hit, _mm256_cmpeq_epi8(v, lowest));
      neg_sum = _mm256_add_epi64(neg_sum, _mm256_sad_epu8(_mm256_and_si256(abs, mask), zero));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + k), abs);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(mk + k), mask);
    }
    if (!_mm256_testz_si256(hit, hit)) return false;
    alignas(32) std::int64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), neg_sum);
    std::int64_t negative = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; k < K; ++k) {
      if (src[k] == -128) return false;
      const bool is_neg = src[k] < 0;
      u[k] = static_cast<std::int8_t>(is_neg ? -src[k] : src[k]);
      mk[k] = static_cast<std::int8_t>(is_neg ? -1 : 0);
      if (is_neg) negative -= src[k];
    }
    for (; k < Kp; ++k) u[k] = mk[k] = 0;
    corr[m] = static_cast<std::int32_t>(negative);  // ≤ 127 · 133,143 < 2³¹
  }
  return true;
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

// The whole product for a [M, K] and b [N, K], contiguous int8; `ep` as above; nullopt when a
// holds −128 (the caller takes float_exact).
std::optional<at::Tensor> run(const at::Tensor& a, const at::Tensor& b, const Epilogue& ep) {
  TORCH_CHECK(avx2_int8_gemm_available(), "int8_gemm: the avx2 backend needs a CPU with AVX2");
  const std::int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  at::Tensor acc = at::empty({M, N}, at::TensorOptions().dtype(at::kFloat));  // [M, N]
  if (M == 0 || N == 0) return acc;
  if (K == 0) {
    if (ep.a_scale != nullptr) return std::nullopt;  // the caller's path applies the epilogue to zeros
    return acc.zero_();
  }
#ifdef QEVAL_INT8_HAS_AVX2_VARIANT
  const std::int8_t* pa = a.data_ptr<std::int8_t>();
  const std::int8_t* pb = b.data_ptr<std::int8_t>();
  const std::int64_t Kp = round_up(K, kKb);
  at::Tensor packed = at::empty({2, M, Kp}, at::TensorOptions().dtype(at::kChar));  // [|a|, mask] × [M, Kp]
  at::Tensor corr_t = at::empty({M}, at::TensorOptions().dtype(at::kInt));          // [M] Σ_{a<0} |a|
  std::int8_t* ua = packed.data_ptr<std::int8_t>();
  std::int8_t* ma = ua + M * Kp;
  std::int32_t* corr = corr_t.data_ptr<std::int32_t>();
  std::atomic<bool> ok{true};
  at::parallel_for(0, M, 16, [&](std::int64_t begin, std::int64_t end) {
    if (!pack_rows(pa, K, Kp, begin, end, ua, ma, corr)) ok = false;
  });
  if (!ok) return std::nullopt;  // a holds −128
  // b packed once: panel p holds columns [16p, 16p + 16) over all of Kp, Kp / 16 blocks of 256 bytes.
  const std::int64_t panels = (N + kNr - 1) / kNr, panel_bytes = Kp * kNr;
  at::Tensor packed_b = at::empty({panels * panel_bytes}, at::TensorOptions().dtype(at::kChar));  // 64-byte aligned
  std::int8_t* pbp = packed_b.data_ptr<std::int8_t>();
  at::parallel_for(0, panels, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) pack_slice(pb, N, K, p * kNr, 0, Kp, pbp + p * panel_bytes);
  });
  // Tiles of kMb rows × one panel, row blocks outermost: a thread's rows of |a| and mask (kMb · kKc · 2
  // bytes) stay in L2 while it walks the panels, and each 16 KiB slice of a panel stays in L1 for kMb rows.
  float* out = acc.data_ptr<float>();
  const std::int64_t row_blocks = (M + kMb - 1) / kMb;
  at::parallel_for(0, row_blocks * panels, 1, [&](std::int64_t t_begin, std::int64_t t_end) {
    at::Tensor sums_t = at::empty({kMb, kNr}, at::TensorOptions().dtype(at::kInt));  // one tile's int32 sums
    std::int32_t* sums = sums_t.data_ptr<std::int32_t>();
    for (std::int64_t t = t_begin; t < t_end; ++t) {
      const std::int64_t m0 = (t / panels) * kMb, rows = std::min(kMb, M - m0), p = t % panels, n0 = p * kNr;
      run_tile(ua + m0 * Kp, ma + m0 * Kp, corr + m0, Kp, pbp + p * panel_bytes, m0, rows, n0, std::min(kNr, N - n0),
               ep, out + m0 * N + n0, N, sums);
    }
  });
#endif
  return acc;
}

}  // namespace

at::Tensor int8_matmul_acc_avx2(const at::Tensor& a, const at::Tensor& b) {
  std::optional<at::Tensor> acc = run(a, b, Epilogue{});
  return acc ? *acc : int8_matmul_acc_float(a, b);
}

at::Tensor int8_gemm_avx2(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                          const at::Tensor& b_scale, const at::Tensor& bias) {
  Epilogue ep;
  ep.a_scale = a_scale.data_ptr<float>();
  ep.a_each = a_scale.numel() != 1;
  ep.b_scale = b_scale.data_ptr<float>();
  ep.b_each = b_scale.numel() != 1;
  ep.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  std::optional<at::Tensor> y = run(a, b, ep);
  if (y) return *y;
  // a holds −128: the exact sums through float_exact, then the same epilogue.
  at::Tensor acc = int8_matmul_acc_float(a, b);  // [M, N]
  acc = acc * (ep.a_each ? a_scale.unsqueeze(1) : a_scale);
  acc = acc * b_scale;
  return bias.defined() ? acc + bias : acc;
}

}  // namespace qeval::kernels::cpu
