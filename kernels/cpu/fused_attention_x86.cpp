// Fused causal attention for x86-64 CPUs (kernels/cpu/fused_attention_cpu.h), in two variants of
// one kernel (kernels/cpu/fused_attention_kernel.inc): AVX2 + FMA, 8 lanes, and AVX-512, 16 lanes.
//
// Why it exists: model/causal_attention_cpu.cpp computes each block of 64 queries against the keys
// it can see with LibTorch ops: a BLAS call for the scores, a scale, a mask, a softmax, a BLAS call
// for the product with v. Per layer of SmolLM2-135M at L = 512 that is 72 blocks × 7 ops, and
// OpenBLAS zero-fills and repacks every small output and operand; perf put its packing and
// zeroing (sgemm_oncopy, sgemm_beta) at a third of its GEMM kernel's samples there, and the whole
// attention ran at about a third of the fp32 GEMM's peak. Here one thread takes a block of queries
// through all of it: scores from an FMA micro-kernel, the softmax in a per-thread buffer of 64 rows,
// and the product with v read straight from the tensor.
//
// Per work item (batch b, head h, block of 64 queries [r0, r0 + rows)), in tiles of 6 queries:
//   1. scores s[i][j] = scale · q_i · k_j for the keys of the block, 6 queries × 2W keys at a time
//      (12 vector accumulators, an FMA micro-kernel over hd; W = 8 or 16 lanes). kᵀ is packed once
//      per kv head into panels of 2W keys ([panel][d][2W]), shared by every query block and every
//      head of its group. Key panels are the outer loop, so a panel serves all the block's tiles
//      from L1; tiles wholly above the diagonal or before the window are not computed.
//   2. per query, over exactly the keys it sees: the row max m, e = exp(s - m) in place, Σ e; the
//      entries of its tile's key range it does not see are set to 0.
//   3. o_i = Σ_j e_ij v_j, 6 queries × 2W channels at a time, v read in place, in chunks of 128 keys
//      as the outer loop (a chunk of v serves all tiles from L1/L2; partial sums wait in a buffer);
//      then out_i = o_i / Σ_j e_ij. When the probabilities are wanted (attention statistics),
//      e_ij / Σ_j e_ij is written out too; the output does not depend on whether they are.
// With the tile loops innermost instead, every tile streamed all of kᵀ and v (512 KiB a head at
// L = 2,048) from L3, and the kernel ran at two thirds of the fp32 GEMM's rate; now it runs at about
// its rate (bench/attention_bench).
//
// Why two widths: on an Intel core with two 512-bit FMA units the AVX2 variant leaves half of each
// idle, and ran at 0.83–1.04× LibTorch's op-by-op blocks on MKL there
// (results/gpu/2026-11-27-h200/README.md); Zen 4 splits 512-bit operations in two, so there the
// widths are close.
//
// Softmax-1 takes m = max(row max, 0) and divides by e^-m + Σ e, as model/transformer.cpp's
// softmax1. exp is the Cephes single-precision polynomial (about 1 ulp; below e^-87.3, under
// float's normal range, it gives 0). Every output is computed by one thread in one fixed order, so
// the bits do not depend on the number of threads. Functions carry __attribute__((target)) rather
// than the build using -mavx2 -mfma, so the binary still runs on any x86-64.
#include "kernels/cpu/fused_attention_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), a self-initialised variable that
// -Wmaybe-uninitialized reports once they are inlined (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define QEVAL_ATTENTION_HAS_X86_VARIANTS 1
#define QEVAL_AVX2_FMA __attribute__((target("avx2,fma")))
#define QEVAL_AVX512 __attribute__((target("avx512f,avx512dq,avx2,fma")))
#endif

namespace qeval::kernels::cpu {

namespace {

bool cpu_runs(FusedAttentionIsa isa) {
#ifdef QEVAL_ATTENTION_HAS_X86_VARIANTS
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return isa == FusedAttentionIsa::avx2 ? avx2 : isa == FusedAttentionIsa::avx512 ? avx512 : false;
#else
  (void)isa;
  return false;
#endif
}

}  // namespace

const char* fused_attention_isa_name(FusedAttentionIsa isa) {
  switch (isa) {
    case FusedAttentionIsa::avx2: return "avx2";
    case FusedAttentionIsa::avx512: return "avx512";
    case FusedAttentionIsa::none: break;
  }
  return "none";
}

FusedAttentionIsa fused_attention_isa() {
  if (cpu_runs(FusedAttentionIsa::avx512)) return FusedAttentionIsa::avx512;
  return cpu_runs(FusedAttentionIsa::avx2) ? FusedAttentionIsa::avx2 : FusedAttentionIsa::none;
}

bool fused_causal_attention_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, FusedAttentionIsa isa) {
  if (!cpu_runs(isa)) return false;
  auto cpu_float4 = [](const at::Tensor& t) { return t.dim() == 4 && t.device().is_cpu() && t.scalar_type() == at::kFloat; };
  if (!cpu_float4(q) || !cpu_float4(k) || !cpu_float4(v) || k.sizes() != v.sizes()) return false;
  const std::int64_t H = q.size(1), Hkv = k.size(1), hd = q.size(3);
  const std::int64_t lanes = isa == FusedAttentionIsa::avx512 ? 16 : 8;
  return k.size(0) == q.size(0) && Hkv > 0 && H % Hkv == 0 && k.size(2) == q.size(2) && k.size(3) == hd && hd > 0 &&
         hd % lanes == 0;
}

FusedAttentionIsa fused_attention_isa_for(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  for (FusedAttentionIsa isa : {FusedAttentionIsa::avx512, FusedAttentionIsa::avx2})
    if (fused_causal_attention_fits(q, k, v, isa)) return isa;
  return FusedAttentionIsa::none;
}

#ifdef QEVAL_ATTENTION_HAS_X86_VARIANTS
namespace {

constexpr std::int64_t kQueryBlock = 64;  // queries per work item, as model/causal_attention_cpu.cpp's blocks

std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

struct Problem {
  const float *q, *k_packed, *v;
  std::int64_t q_stride[3], v_stride[3];  // batch, head, position (the channel stride is 1)
  std::int64_t H, group, L, hd, window, panels;
  float scale;
  bool softmax_one;
  float* out;    // [B, L, H·hd]
  float* probs;  // [B, H, L, L], zero-filled, or null
};

// The first key query i sees.
std::int64_t first_key(const Problem& p, std::int64_t i) {
  return p.window > 0 ? std::max<std::int64_t>(0, i - p.window + 1) : 0;
}

// A block's query tiles: queries [first, last] of the block, keys [lo, last] between them.
struct Tile {
  std::int64_t m0, rows, first, last, lo;
};

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
  // The two halves added, then the AVX2 order.
  QEVAL_AVX512 static float lane_sum(V x) {
    return Avx2Ops::lane_sum(_mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));
  }
  QEVAL_AVX512 static float lane_max(V x) {
    return Avx2Ops::lane_max(_mm256_max_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));
  }
  QEVAL_AVX512 static float first_lane(V x) { return _mm512_cvtss_f32(x); }
};

namespace avx2 {
using S = Avx2Ops;
#define QEVAL_SIMD QEVAL_AVX2_FMA
#include "kernels/cpu/fused_attention_kernel.inc"
#undef QEVAL_SIMD
}  // namespace avx2

namespace avx512 {
using S = Avx512Ops;
#define QEVAL_SIMD QEVAL_AVX512
#include "kernels/cpu/fused_attention_kernel.inc"
#undef QEVAL_SIMD
}  // namespace avx512

}  // namespace
#endif

at::Tensor fused_causal_attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                  std::int64_t window, double scale, bool softmax_one, at::Tensor* probs,
                                  FusedAttentionIsa isa) {
  TORCH_CHECK(cpu_runs(isa), "fused_causal_attention: this CPU does not run the ", fused_attention_isa_name(isa),
              " variant");
  TORCH_CHECK(fused_causal_attention_fits(q_in, k_in, v_in, isa), "fused_causal_attention (",
              fused_attention_isa_name(isa), "): q ", q_in.sizes(), ", k ", k_in.sizes(), " and v ", v_in.sizes(),
              " do not fit (float32 CPU [B, H, L, hd] and [B, Hkv, L, hd], H a multiple of Hkv, hd a multiple of ",
              isa == FusedAttentionIsa::avx512 ? 16 : 8, ")");
  auto unit_channel_stride = [](const at::Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); };
  const at::Tensor q = unit_channel_stride(q_in), k = unit_channel_stride(k_in), v = unit_channel_stride(v_in);
  const std::int64_t B = q.size(0), H = q.size(1), L = q.size(2), hd = q.size(3);
  at::Tensor out = at::empty({B, L, H * hd}, q.options());  // [B, L, H·hd]
  if (probs != nullptr) *probs = at::zeros({B, H, L, L}, q.options());
  if (B == 0 || L == 0) return out;
#ifdef QEVAL_ATTENTION_HAS_X86_VARIANTS
  if (isa == FusedAttentionIsa::avx512)
    avx512::attend(q, k, v, window, scale, softmax_one, out, probs);
  else
    avx2::attend(q, k, v, window, scale, softmax_one, out, probs);
#endif
  return out;
}

}  // namespace qeval::kernels::cpu
