#include "model/block.h"

#include <ATen/core/grad_mode.h>
#include <fmt/format.h>

#include "common/error.h"
#include "model/norms.h"
#include "model/placement.h"

namespace qeval {

Block::Block(std::shared_ptr<const ModelConfig> config, std::int64_t layer, BlockWeights weights, const std::string& source)
    : config_(std::move(config)), layer_(layer), weights_(std::move(weights)) {
  QEVAL_CHECK(config_ != nullptr, "Block: no config");
  QEVAL_CHECK(layer_ >= 0 && layer_ < config_->n_layers, "Block: layer {} outside the model's {} layers", layer_,
              config_->n_layers);
  validate_block_weights(weights_, *config_, layer_, source);
  const BlockWeights& b = weights_;
  for (const std::string& name : block_linear_names(*config_, layer_)) {
    const std::string kind = name.substr(name.find('.', name.find('.') + 1) + 1);  // "attn.q", "mlp.down", ...
    struct Slot {
      const char* kind;
      int LinearSlots::*slot;
      const LinearWeights BlockWeights::*weights;
    };
    static const Slot slots[] = {{"attn.qkv", &LinearSlots::qkv, &BlockWeights::qkv}, {"attn.q", &LinearSlots::q, &BlockWeights::q},
                                 {"attn.k", &LinearSlots::k, &BlockWeights::k},       {"attn.v", &LinearSlots::v, &BlockWeights::v},
                                 {"attn.o", &LinearSlots::o, &BlockWeights::o},       {"mlp.gate_up", &LinearSlots::gate_up, &BlockWeights::gate_up},
                                 {"mlp.gate", &LinearSlots::gate, &BlockWeights::gate}, {"mlp.up", &LinearSlots::up, &BlockWeights::up},
                                 {"mlp.down", &LinearSlots::down, &BlockWeights::down}};
    for (const Slot& slot : slots) {
      if (kind != slot.kind) continue;
      const LinearWeights& w = b.*slot.weights;
      linears_.push_back({name, std::make_shared<FloatLinear>(w.weight, w.bias)});
      slots_.*slot.slot = static_cast<int>(linears_.size() - 1);
    }
  }
}

std::vector<std::string> block_linear_names(const ModelConfig& c, std::int64_t layer) {
  const std::string p = fmt::format("layers.{}.", layer);
  std::vector<std::string> names;
  if (c.fused_qkv) {
    names.push_back(p + "attn.qkv");
  } else {
    for (const char* kind : {"attn.q", "attn.k", "attn.v"}) names.push_back(p + kind);
  }
  names.push_back(p + "attn.o");
  if (c.fused_gate_up) {
    names.push_back(p + "mlp.gate_up");
  } else {
    if (c.gated_mlp()) names.push_back(p + "mlp.gate");
    names.push_back(p + "mlp.up");
  }
  names.push_back(p + "mlp.down");
  return names;
}

std::vector<std::string> model_linear_names(const ModelConfig& c) {
  std::vector<std::string> names;
  for (std::int64_t i = 0; i < c.n_layers; ++i)
    for (auto& name : block_linear_names(c, i)) names.push_back(std::move(name));
  names.push_back("lm_head");
  return names;
}

bool Block::replace_linear(const std::string& name, std::shared_ptr<const Linear> replacement) {
  QEVAL_CHECK(replacement != nullptr, "replace_linear: null replacement for {}", name);
  for (auto& named : linears_) {
    if (named.name != name) continue;
    QEVAL_CHECK(replacement->in_features() == named.linear->in_features() &&
                    replacement->out_features() == named.linear->out_features(),
                "replace_linear: {} is [{} -> {}], replacement is [{} -> {}]", name, named.linear->in_features(),
                named.linear->out_features(), replacement->in_features(), replacement->out_features());
    named.linear = std::move(replacement);
    return true;
  }
  return false;
}

Block Block::placed(PlacementCache& cache) const {
  Block out = *this;
  BlockWeights& b = out.weights_;
  for (NormWeights* n : {&b.attn_norm, &b.q_norm, &b.k_norm, &b.post_attn_norm, &b.mlp_norm, &b.post_mlp_norm}) {
    n->weight = cache.move(n->weight);
    n->bias = cache.move(n->bias);
  }
  b.down_input_rotation = cache.move(b.down_input_rotation);
  for (auto& named : out.linears_) named.linear = named.linear->placed(cache);
  return out;
}

std::int64_t Block::linear_weight_bytes() const {
  std::int64_t total = 0;
  for (const auto& named : linears_) total += named.linear->weight_bytes();
  return total;
}

at::Tensor Block::norm(const at::Tensor& x, const NormWeights& w) const { return apply_norm(x, w, *config_); }

namespace {

// x += y, in place when no gradient is recorded: x is the pass's own residual stream (the
// embedding's index_select made it), and observers reduce what they are handed during the call
// and keep no reference.
void residual_add(at::Tensor& x, const at::Tensor& y) {
  const bool in_place = !at::GradMode::is_enabled() || (!x.requires_grad() && !y.requires_grad());
  x = in_place ? x.add_(y) : x + y;
}

}  // namespace

void Block::forward(at::Tensor& x, const ForwardContext& context, ForwardObserver* observer) const {
  const BlockWeights& b = weights_;
  if (config_->parallel_residual) {  // both branches read the block's input (NeoX)
    at::Tensor attn_out = attention(norm(x, b.attn_norm), context, observer);
    at::Tensor mlp_out = mlp(norm(x, b.mlp_norm));
    residual_add(x, attn_out);
    residual_add(x, mlp_out);
  } else if (config_->sandwich_norms) {  // each branch's output normed before its residual add (Gemma-3)
    residual_add(x, norm(attention(norm(x, b.attn_norm), context, observer), b.post_attn_norm));
    residual_add(x, norm(mlp(norm(x, b.mlp_norm)), b.post_mlp_norm));
  } else {
    residual_add(x, attention(norm(x, b.attn_norm), context, observer));
    residual_add(x, mlp(norm(x, b.mlp_norm)));
  }
}

}  // namespace qeval
