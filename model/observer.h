// ForwardObserver: how statistics see the forward pass without the model storing activations.
// The transformer calls it per layer as it goes; an observer copies what it needs and reduces.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace qeval {

// One layer's attention statistics as the fused CUDA kernel reduces them (kernels/attention_statistics.h),
// in place of the [B, H, L, L] probabilities.
struct AttentionSums {
  // [B, H, 4] float64, on the attention's device: per batch row and head, with 1-based queries i,
  // reach = min(L, window) (L for a global layer) and T' = min(sink_T, reach):
  //   Σ_{i ≤ T'} A[i, 1],  Σ_{2 ≤ i ≤ reach} A[i, 1],  Σ_{2 ≤ i ≤ reach} first-attn credit (1/k for a maximum
  //   shared by k keys, key 1 among them),  Σ_{i ≤ L} entropy of row i (nats).
  at::Tensor sums;
  std::int64_t length = 0;  // L
  std::int64_t window = 0;  // the window that set reach, as the observer asked for it (0: global)
  std::int64_t sink_T = 0;  // T as the observer asked for it
};

// What an observer asks of the fused kernel: T of Sink₁^ε and the window whose queries count (the
// observer's view of the layer's window, which sets reach; the attention itself always uses the model's).
struct AttentionSumsRequest {
  std::int64_t sink_T = 64;
  std::int64_t window = 0;
};

// What a state-space layer's scan selects with, in the scan's dtype (float32 or float64; half on a GPU),
// on its device (model/ssm_scan.h):
//   Mamba (S6):  delta [B, L, E] (after softplus), A [E, N], Bm and Cm [B, L, N]
//   Mamba-2:     delta [B, L, H] (after softplus and the time-step clamp), A [H], Bm and Cm [B, L, G, N]
// Views of the layer's live tensors: reduce them during the call.
struct SsmSelection {
  enum class Kind { mamba, mamba2 };
  Kind kind = Kind::mamba;
  at::Tensor delta, A, Bm, Cm;
};

class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;

  // Hidden state after block `layer` (0-based): after the second residual add, before the
  // final norm. hidden: [B, L, D] float. It is the live residual stream, updated in place by the
  // next block: reduce it during the call, or clone it to keep it.
  virtual void on_block_output(std::int64_t layer, const at::Tensor& hidden) {}

  // Asked before each layer's attention; the probabilities are handed over only when true.
  virtual bool wants_attention(std::int64_t layer) const { return false; }

  // Attention probabilities of block `layer`: [B, H, L(query), L(key)], causal (zero above the
  // diagonal). Rows sum to 1 for softmax and to less than 1 for softmax-1.
  virtual void on_attention(std::int64_t layer, const at::Tensor& probs) {}

  // Asked first, on a GPU: true when the observer takes the fused kernel's per-head sums
  // (on_attention_sums) instead of the probabilities, filling *request. Where the kernel does not
  // serve the layer, the model falls back to wants_attention / on_attention.
  virtual bool wants_attention_sums(std::int64_t layer, AttentionSumsRequest* request) const { return false; }
  virtual void on_attention_sums(std::int64_t layer, const AttentionSums& sums) {}

  // Mixture-of-experts layers: asked before each routing; when true, the router's softmax over
  // all experts probs [B, L, E] (float32) and the experts each token goes to, selected [B, L, k]
  // int64 (in the router's order: the largest weight first).
  virtual bool wants_router(std::int64_t layer) const { return false; }
  virtual void on_router(std::int64_t layer, const at::Tensor& probs, const at::Tensor& selected) {}

  // State-space layers (Mamba and Mamba-2): asked before each scan; when true, what the scan selects
  // with (SsmSelection), from which an observer computes the layer's implicit attention and selection
  // statistics (stats/implicit_attention.h) without the [B, heads, L, L] matrix.
  virtual bool wants_ssm_selection(std::int64_t layer) const { return false; }
  virtual void on_ssm_selection(std::int64_t layer, const SsmSelection& selection) {}
};

}  // namespace qeval
