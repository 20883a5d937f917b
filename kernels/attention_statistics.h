// The statistics of DESIGN.md §6 reduced on the device, for GPU tensors (issue 43): a causal
// attention that reports, per batch row and head, the sums the attention statistics keep, and
// the hidden-state statistics of a block output in one read. The CUDA kernels are in
// kernels/cuda/fused_attention_stats.h (definitions, tie rule, entropy formula); this is the one
// dispatch point, with no build flags in sight. Where a build, device or shape is not served,
// `*_unsupported` says why and callers take the unfused path (the probabilities through ATen).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace qeval::kernels {

// "" when fused_attention_stats serves q [B, H, L, hd] and k, v [B, Hkv, L, hd]: a build with the CUDA
// kernels and a CUDA LibTorch, CUDA tensors of float, half or bfloat16, hd ≤ 256, H a multiple of Hkv.
std::string fused_attention_stats_unsupported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// out [B, L, H·hd] in q's dtype (undefined when !with_output: the statistics alone, v unread): softmax
// (or softmax-1) over the keys j ≤ i with i − j < window (0: all) of softcap·tanh(scale·q·k / softcap)
// (softcap 0: scale·q·k), times v; float32 inside. head_sums non-null:
// [B, H, 4] float64 on q's device = {Σ_{i<T'} A[i,1], Σ_{i=2..reach} A[i,1], Σ_{i=2..reach} first-attn credit,
// Σ_{i=1..L} entropy} (1-based i; reach = min(L, stats_window), or L for stats_window 0; T' = min(sink_T, reach)).
// stats_window only chooses which queries count (the caller's view of the layer's window); `window` masks.
at::Tensor fused_attention_stats(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t window,
                                 double scale, double softcap, bool softmax_one, std::int64_t sink_T,
                                 std::int64_t stats_window, at::Tensor* head_sums, bool with_output = true);

// "" when hidden_stats serves hidden [B, L, D] (CUDA float, half or bfloat16, D ≤ 49152).
std::string hidden_stats_unsupported(const at::Tensor& hidden);

// [B, 9] float64 on hidden's device: stats/hidden_stats.h's HiddenLayerStats fields per sequence, in order.
at::Tensor hidden_stats(const at::Tensor& hidden);

}  // namespace qeval::kernels
