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

#include "kernels/cpu/simd_x86.h"

namespace qeval::kernels::cpu {

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

#ifdef QEVAL_HAS_X86_VARIANTS
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

namespace avx2 {
using S = simd::Avx2Ops;
#define QEVAL_SIMD QEVAL_AVX2_FMA
#include "kernels/cpu/fused_attention_kernel.inc"
#undef QEVAL_SIMD
}  // namespace avx2

namespace avx512 {
using S = simd::Avx512Ops;
#define QEVAL_SIMD QEVAL_AVX512
#include "kernels/cpu/fused_attention_kernel.inc"
#undef QEVAL_SIMD
}  // namespace avx512

}  // namespace
#endif

at::Tensor fused_causal_attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                  std::int64_t window, double scale, bool softmax_one, at::Tensor* probs,
                                  FusedAttentionIsa isa) {
  TORCH_CHECK(cpu_runs(isa), "fused_causal_attention: this CPU does not run the ", cpu_isa_name(isa),
              " variant");
  TORCH_CHECK(fused_causal_attention_fits(q_in, k_in, v_in, isa), "fused_causal_attention (",
              cpu_isa_name(isa), "): q ", q_in.sizes(), ", k ", k_in.sizes(), " and v ", v_in.sizes(),
              " do not fit (float32 CPU [B, H, L, hd] and [B, Hkv, L, hd], H a multiple of Hkv, hd a multiple of ",
              isa == FusedAttentionIsa::avx512 ? 16 : 8, ")");
  auto unit_channel_stride = [](const at::Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); };
  const at::Tensor q = unit_channel_stride(q_in), k = unit_channel_stride(k_in), v = unit_channel_stride(v_in);
  const std::int64_t B = q.size(0), H = q.size(1), L = q.size(2), hd = q.size(3);
  at::Tensor out = at::empty({B, L, H * hd}, q.options());  // [B, L, H·hd]
  if (probs != nullptr) *probs = at::zeros({B, H, L, L}, q.options());
  if (B == 0 || L == 0) return out;
#ifdef QEVAL_HAS_X86_VARIANTS
  if (isa == FusedAttentionIsa::avx512)
    avx512::attend(q, k, v, window, scale, softmax_one, out, probs);
  else
    avx2::attend(q, k, v, window, scale, softmax_one, out, probs);
#endif
  return out;
}

}  // namespace qeval::kernels::cpu
