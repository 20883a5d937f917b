// Causal attention with the attention statistics of DESIGN.md §6 computed in the same pass, and
// the hidden-state statistics of one block output in one read (issue 43). Plain C++ header: raw
// device pointers and a stream; kernels/cuda/adapter_torch.h hands them at::Tensors.
//
// fused_attention: for batch row b, head h (kv head h / (H / Hkv): grouped-query attention by
// index, k and v are never repeated) and query i (0-based), the keys j ≤ i with i − j < window
// (window 0: all j ≤ i) get the logits
//     s_ij = c · tanh(scale · q_i·k_j / c)    (soft cap c > 0)    or    scale · q_i·k_j    (c = 0)
// and the weights  A_ij = exp(s_ij − m_i) / ℓ_i  with, for the plain softmax, m_i = max_j s_ij and
// ℓ_i = Σ_j exp(s_ij − m_i); for softmax-1 (an implicit extra logit 0 that takes weight but has
// no value) m_i = max(0, max_j s_ij) and ℓ_i = exp(−m_i) + Σ_j exp(s_ij − m_i), as model/
// transformer.cpp's softmax1 computes it. out_i = Σ_j A_ij v_j. Everything in float32 whatever
// the input type (inputs are widened exactly; the output is rounded once to the input type).
// The tiling is FlashAttention-2's: blocks of 32 queries sweep tiles of 32 keys held in shared
// memory with an online softmax (running m, ℓ, rescaled on a new maximum); the weights are never
// written to memory. Scores and products run on the CUDA cores in float32 (no tensor cores:
// fp32 inputs keep fp32 accuracy and the tie rule below sees float32 logits), except the
// statistics-only pass (out = nullptr) of half and bfloat16 inputs on compute capability ≥ 8.0
// when args.tensor_cores asks for it: its logits come from tensor-core MMAs with float32
// accumulation, 64 queries × 64 keys a tile (kernels/cuda/attention_stats_tensor_cores.h).
//
// Statistics (query_stats non-null): per (b, h, i), written to query_stats [3, B, H, L] float:
//   [0] A_i1, the weight of key 1 (key index 0), = exp(s_i1 − m_i)/ℓ_i (0 when i's window excludes it);
//   [1] the first-attn credit: 1/k when key 1 holds the row's largest weight and k keys share that
//       largest weight, else 0 (stats/attention_stats.h). The largest weight is the largest logit's;
//       ties are equal float32 logits (equal logits give equal weights). Where eval/attention_stats
//       compares rounded float32 weights instead, two cases are carried over: a key-1 weight that
//       rounds to the largest weight while its logit is smaller also counts as tied (with k one more
//       than the equal largest logits), and a row whose largest weight underflows to 0 (softmax-1
//       with every logit below about −87) ties all i + 1 causal keys, as the all-zero row does
//       there. A weight rounding equal to the largest from a third key is not seen (such a row's
//       credit can differ from the unfused path's by a few keys' count; scores 1 ulp apart).
//   [2] the entropy −Σ_j A_ij log A_ij over the real keys (softmax-1's implicit key is not a weight
//       the observers see): with E_i = Σ_j exp(s_ij − m_i) and S_i = Σ_j exp(s_ij − m_i)(s_ij − m_i)
//       (both rescaled online like ℓ), H_i = log(ℓ_i)·E_i/ℓ_i − S_i/ℓ_i; E_i = ℓ_i for the softmax.
//       Both terms are ≥ 0: no cancellation for large logits.
// head_sums (non-null, needs query_stats): [B, H, 4] float64 reduced on the device in a fixed order
// (deterministic, batch-independent): {Σ_{i < T'} A_i1, Σ_{1 ≤ i < reach} A_i1,
// Σ_{1 ≤ i < reach} credit_i, Σ_{i < L} H_i} with reach = min(L, stats_window) (L for 0; callers pass
// the layer's window, or the observer's view of it when that differs, as stats/attention_stats.cpp does) and
// T' = min(sink_T, reach): exactly the sums stats/attention_stats.cpp keeps per sequence and head.
//
// hidden_stats: x [N = B·L, D] rows (f32/f16/bf16, contiguous); one block per row stages the row in
// shared memory (one read of x), then per row in float64: kurtosis E[(x−μ)^4]/E[(x−μ)^2]^2, max|x|
// with its lowest maximal channel and signed value, max|x| / ‖x‖₂; a second launch reduces each
// sequence of L rows (fixed order) to `sequence_stats` [B, 9] float64 = {κ_first, κ_rest,
// max_first, max_rest, r_first, r_rest, largest value, its channel, its position (0-based, the
// earliest of equal maxima)}: the fields of stats/hidden_stats.h's HiddenLayerStats, in order. The
// "rest" means are over positions 1..L−1 (NaN for L = 1). row_scratch: [5, N] float64.
//
// Limits: head_dim ≤ 256 (any value, zero-padded to a multiple of 4 in shared memory); D ≤
// kHiddenStatsMaxChannels; sizes beyond int32 in a tensor's elements are fine (int64 indices).
#pragma once

#include <cstdint>

#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda {

inline constexpr std::int64_t kFusedAttentionMaxHeadDim = 256;
inline constexpr std::int64_t kHiddenStatsMaxChannels = 49152;  // 192 KiB of float in shared memory

struct FusedAttentionArgs {
  // q [B, H, L, hd], k and v [B, Hkv, L, hd] of `type`, the last dimension contiguous; the other
  // strides in elements (q_strides = {batch, head, position}, likewise k and v).
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  std::int64_t q_strides[3] = {0, 0, 0};
  std::int64_t k_strides[3] = {0, 0, 0};
  std::int64_t v_strides[3] = {0, 0, 0};
  FloatType type = FloatType::f32;
  void* out = nullptr;  // [B, L, H, hd] of `type`, contiguous; nullptr: statistics only (v is not read)
  std::int64_t batch = 0, heads = 0, kv_heads = 0, length = 0, head_dim = 0;
  float scale = 1.0f;
  float softcap = 0.0f;     // c > 0: c·tanh(s / c) on the scaled logits
  std::int64_t window = 0;  // 0: global; w > 0: keys j with i − j < w
  bool softmax_one = false;
  float* query_stats = nullptr;  // [3, B, H, L] or nullptr (no statistics)
  double* head_sums = nullptr;   // [B, H, 4] or nullptr
  std::int64_t sink_T = 64;      // T of Sink₁^ε (≥ 1)
  std::int64_t stats_window = 0;  // sets reach below (which queries the sums count); `window` masks
  // Statistics alone (out == nullptr) in f16 / bf16 on a device of compute capability ≥ 8.0: the
  // logits on tensor cores (kernels/cuda/attention_stats_tensor_cores.h). Off by default until a
  // GPU run has held that kernel to its tests; the Torch adapter turns it on for
  // QEVAL_ATTENTION_STATS_CORES=tensor.
  bool tensor_cores = false;
};

// Empty when these arguments are served, else why not (in words, for the record's fallback note).
const char* fused_attention_unsupported_reason(const FusedAttentionArgs& args);
void fused_attention(const FusedAttentionArgs& args, Stream stream = nullptr);

void hidden_stats(const void* x, FloatType type, std::int64_t batch, std::int64_t length, std::int64_t channels,
                  double* row_scratch, double* sequence_stats, Stream stream = nullptr);

}  // namespace qeval::kernels::cuda
