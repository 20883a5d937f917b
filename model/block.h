// Block: one layer of the model, a mixer and an MLP between norms (DESIGN.md §3), with its own
// weights and linears. The transformer is an embedding, a sequence of blocks and a head; the
// layer-major evaluator (eval/evaluator.h) builds, quantises and runs blocks one layer at a time,
// so a block is self-contained: it needs only the config, its weights and the pass's context.
//
// Every projection is a Linear named canonically (layers.{i}.attn.{qkv|q|k|v|o},
// layers.{i}.mlp.{up|gate|gate_up|down}) so quant/ can rewrite it; an observer sees the
// attention probabilities when it asks (the hidden state after the block is the caller's to hand).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/forward_context.h"
#include "model/linear.h"
#include "model/observer.h"
#include "model/weights.h"

namespace qeval {

class PlacementCache;

struct NamedLinear {
  std::string name;  // layers.{i}.attn.{qkv|q|k|v|o}, layers.{i}.mlp.{up|gate|gate_up|down}, lm_head
  std::shared_ptr<const Linear> linear;
};

// The canonical names of a layer's linears in execution order (what Block::linears() holds).
std::vector<std::string> block_linear_names(const ModelConfig& config, std::int64_t layer);
// Every linear of the model in execution order: each layer's, then "lm_head".
std::vector<std::string> model_linear_names(const ModelConfig& config);

class Block {
 public:
  // Validates the weights against the config (throws naming `source`, the tensor and both shapes)
  // and wraps every linear weight in a FloatLinear. Copies are cheap and share all tensors.
  Block(std::shared_ptr<const ModelConfig> config, std::int64_t layer, BlockWeights weights,
        const std::string& source = "model");

  // x [B, L, D] → the block's output, written to x (the residual stream is updated in place
  // when no gradient is recorded).
  void forward(at::Tensor& x, const ForwardContext& context, ForwardObserver* observer) const;

  std::int64_t layer() const { return layer_; }
  const ModelConfig& config() const { return *config_; }
  const BlockWeights& weights() const { return weights_; }
  // This block's linears in execution order.
  const std::vector<NamedLinear>& linears() const { return linears_; }
  // Routes the named projection through `replacement` (same in/out features). Returns false when
  // the block has no linear of that name; throws when the sizes differ.
  bool replace_linear(const std::string& name, std::shared_ptr<const Linear> replacement);
  // This block on the cache's device and dtype (norms and every linear placed through the cache).
  Block placed(PlacementCache& cache) const;
  std::int64_t linear_weight_bytes() const;

 private:
  struct LinearSlots {
    int qkv = -1, q = -1, k = -1, v = -1, o = -1, up = -1, gate = -1, gate_up = -1, down = -1;  // indices into linears_
  };
  // model/attention.cpp
  at::Tensor attention(const at::Tensor& h, const ForwardContext& context, ForwardObserver* observer) const;
  // model/dense_mlp.cpp
  at::Tensor mlp(const at::Tensor& h) const;
  at::Tensor norm(const at::Tensor& x, const NormWeights& w) const;
  const Linear& linear(int index) const { return *linears_[static_cast<std::size_t>(index)].linear; }

  std::shared_ptr<const ModelConfig> config_;
  std::int64_t layer_ = 0;
  BlockWeights weights_;
  std::vector<NamedLinear> linears_;
  LinearSlots slots_;
};

}  // namespace qeval
