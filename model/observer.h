// ForwardObserver: how statistics see the forward pass without the model storing activations.
// The transformer calls it per layer as it goes; an observer copies what it needs and reduces.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace qeval {

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

  // Mixture-of-experts layers: asked before each routing; when true, the router's softmax over
  // all experts probs [B, L, E] (float32) and the experts each token goes to, selected [B, L, k]
  // int64 (in the router's order: the largest weight first).
  virtual bool wants_router(std::int64_t layer) const { return false; }
  virtual void on_router(std::int64_t layer, const at::Tensor& probs, const at::Tensor& selected) {}

  // Mamba-2 layers: asked before each SSD; when true, the layer's implicit attention (the state-space
  // duality's M = L ∘ (C Bᵀ), normalised as model/ssm_scan.h ssd_implicit_attention says):
  // [B, H, L(query), L(key)], causal, rows of non-negative weights summing to 1.
  virtual bool wants_implicit_attention(std::int64_t layer) const { return false; }
  virtual void on_implicit_attention(std::int64_t layer, const at::Tensor& weights) {}
};

}  // namespace qeval
