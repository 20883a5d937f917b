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
};

}  // namespace qeval
