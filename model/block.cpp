#include "model/block.h"

#include <ATen/core/grad_mode.h>
#include <fmt/format.h>

#include <set>

#include "common/error.h"
#include "model/norms.h"
#include "model/placement.h"

namespace qeval {

namespace {

// The weights of the linear called `kind` ("attn.q", "moe.experts.3.up", "mamba.in_proj", ...) and
// the slot that remembers where it sits in linears_.
struct LinearTarget {
  const LinearWeights* weights = nullptr;
  int* slot = nullptr;
};

LinearTarget linear_target(const BlockWeights& b, const std::string& kind, Block::LinearSlots& s) {
  static const std::pair<const char*, std::pair<const LinearWeights BlockWeights::*, int Block::LinearSlots::*>> fixed[] = {
      {"attn.qkv", {&BlockWeights::qkv, &Block::LinearSlots::qkv}},   {"attn.q", {&BlockWeights::q, &Block::LinearSlots::q}},
      {"attn.k", {&BlockWeights::k, &Block::LinearSlots::k}},         {"attn.v", {&BlockWeights::v, &Block::LinearSlots::v}},
      {"attn.o", {&BlockWeights::o, &Block::LinearSlots::o}},         {"mlp.gate_up", {&BlockWeights::gate_up, &Block::LinearSlots::gate_up}},
      {"mlp.gate", {&BlockWeights::gate, &Block::LinearSlots::gate}}, {"mlp.up", {&BlockWeights::up, &Block::LinearSlots::up}},
      {"mlp.down", {&BlockWeights::down, &Block::LinearSlots::down}}};
  for (const auto& [name, target] : fixed)
    if (kind == name) return {&(b.*target.first), &(s.*target.second)};
  static const std::pair<const char*, std::pair<const LinearWeights SsmWeights::*, int Block::LinearSlots::*>> ssm[] = {
      {"mamba.in_proj", {&SsmWeights::in_proj, &Block::LinearSlots::in_proj}},
      {"mamba.x_proj", {&SsmWeights::x_proj, &Block::LinearSlots::x_proj}},
      {"mamba.dt_proj", {&SsmWeights::dt_proj, &Block::LinearSlots::dt_proj}},
      {"mamba.out_proj", {&SsmWeights::out_proj, &Block::LinearSlots::out_proj}}};
  for (const auto& [name, target] : ssm)
    if (kind == name) return {&(b.ssm.*target.first), &(s.*target.second)};
  // moe.experts.{e}.{gate|up|down}, moe.shared.{gate|up|down}
  const std::size_t dot = kind.rfind('.');
  const std::string part = kind.substr(dot + 1), owner = kind.substr(0, dot);
  const MoeWeights::Expert* expert = nullptr;
  Block::ExpertSlots* slots = nullptr;
  if (owner == "moe.shared") {
    expert = &b.moe.shared, slots = &s.shared;
  } else if (owner.rfind("moe.experts.", 0) == 0) {
    const auto e = static_cast<std::size_t>(std::stoll(owner.substr(12)));
    QEVAL_CHECK(e < b.moe.experts.size(), "Block: no expert {} (the block has {})", e, b.moe.experts.size());
    if (s.experts.size() < b.moe.experts.size()) s.experts.resize(b.moe.experts.size());
    expert = &b.moe.experts[e], slots = &s.experts[e];
  }
  QEVAL_CHECK(expert != nullptr && (part == "gate" || part == "up" || part == "down"), "Block: unknown linear kind {}", kind);
  if (part == "gate") return {&expert->gate, &slots->gate};
  if (part == "up") return {&expert->up, &slots->up};
  return {&expert->down, &slots->down};
}

}  // namespace

Block::Block(std::shared_ptr<const ModelConfig> config, std::int64_t layer, BlockWeights weights, const std::string& source,
             const std::map<std::string, float>& weight_max_abs)
    : config_(std::move(config)), layer_(layer), weights_(std::move(weights)) {
  QEVAL_CHECK(config_ != nullptr, "Block: no config");
  QEVAL_CHECK(layer_ >= 0 && layer_ < config_->n_layers, "Block: layer {} outside the model's {} layers", layer_,
              config_->n_layers);
  validate_block_weights(weights_, *config_, layer_, source);
  for (const std::string& name : block_linear_names(*config_, layer_)) {
    const std::string kind = name.substr(name.find('.', name.find('.') + 1) + 1);  // "attn.q", "mlp.down", ...
    const LinearTarget target = linear_target(weights_, kind, slots_);
    const auto max_abs = weight_max_abs.find(name + ".weight");
    linears_.push_back({name, std::make_shared<FloatLinear>(
                                  target.weights->weight, target.weights->bias,
                                  max_abs == weight_max_abs.end() ? std::nullopt : std::optional<float>(max_abs->second))});
    *target.slot = static_cast<int>(linears_.size() - 1);
  }
}

std::vector<std::string> block_linear_names(const ModelConfig& c, std::int64_t layer) {
  const std::string p = fmt::format("layers.{}.", layer);
  std::vector<std::string> names;
  switch (c.mixer(layer)) {
    case MixerKind::attention:
      if (c.fused_qkv) {
        names.push_back(p + "attn.qkv");
      } else {
        for (const char* kind : {"attn.q", "attn.k", "attn.v"}) names.push_back(p + kind);
      }
      names.push_back(p + "attn.o");
      break;
    case MixerKind::mamba:
      for (const char* kind : {"mamba.in_proj", "mamba.x_proj", "mamba.dt_proj", "mamba.out_proj"}) names.push_back(p + kind);
      break;
    case MixerKind::mamba2:
      for (const char* kind : {"mamba.in_proj", "mamba.out_proj"}) names.push_back(p + kind);
      break;
  }
  switch (c.ffn(layer)) {
    case FfnKind::dense:
      if (c.fused_gate_up) {
        names.push_back(p + "mlp.gate_up");
      } else {
        if (c.gated_mlp()) names.push_back(p + "mlp.gate");
        names.push_back(p + "mlp.up");
      }
      names.push_back(p + "mlp.down");
      break;
    case FfnKind::moe:
      for (std::int64_t e = 0; e < c.moe_experts; ++e)
        for (const char* part : {"gate", "up", "down"}) names.push_back(fmt::format("{}moe.experts.{}.{}", p, e, part));
      if (c.moe_shared_d_ff > 0)
        for (const char* part : {"gate", "up", "down"}) names.push_back(fmt::format("{}moe.shared.{}", p, part));
      break;
    case FfnKind::none: break;
  }
  return names;
}

LinearShape linear_shape(const ModelConfig& c, const std::string& name) {
  if (name == "lm_head") return {c.vocab_size, c.d_model, false};
  const std::string kind = name.substr(name.find('.', name.find('.') + 1) + 1);
  const std::int64_t D = c.d_model, F = c.d_ff, hd = c.head_dim(), H = c.n_heads, Hkv = c.n_kv_heads;
  const std::int64_t E = c.ssm_d_inner, N = c.ssm_d_state, R = c.ssm_dt_rank;
  const bool qkv_bias = c.has_qkv_bias(), ssm_bias = c.ssm_proj_bias;
  if (kind == "attn.qkv") return {(H + 2 * Hkv) * hd, D, qkv_bias};
  if (kind == "attn.q") return {H * hd, D, qkv_bias};
  if (kind == "attn.k" || kind == "attn.v") return {Hkv * hd, D, qkv_bias};
  if (kind == "attn.o") return {D, H * hd, c.attention_bias};
  if (kind == "mlp.gate_up") return {2 * F, D, c.mlp_bias};
  if (kind == "mlp.gate" || kind == "mlp.up") return {F, D, c.mlp_bias};
  if (kind == "mlp.down") return {D, F, c.mlp_bias};
  if (kind == "mamba.in_proj") {
    const bool two = c.has_mixer(MixerKind::mamba);  // a model has one kind of state-space mixer
    return {two ? 2 * E : E + c.ssm_conv_dim(MixerKind::mamba2) + c.ssm_heads, D, ssm_bias};
  }
  if (kind == "mamba.x_proj") return {R + 2 * N, E, false};
  if (kind == "mamba.dt_proj") return {E, R, true};
  if (kind == "mamba.out_proj") return {D, E, ssm_bias};
  const std::size_t dot = kind.rfind('.');
  const std::string part = kind.substr(dot + 1);
  const std::int64_t width = kind.rfind("moe.shared.", 0) == 0 ? c.moe_shared_d_ff : c.expert_d_ff();
  QEVAL_CHECK(kind.rfind("moe.", 0) == 0 && (part == "gate" || part == "up" || part == "down"),
              "linear_shape: unknown linear {}", name);
  return part == "down" ? LinearShape{D, width, c.mlp_bias} : LinearShape{width, D, c.mlp_bias};
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

Block Block::placed(PlacementCache& cache, bool keep_linear_sources) const {
  Block out = *this;
  // Everything the forward reads besides the linears (norms, router, convolution, scan parameters,
  // the online rotation); the linears' own weights are placed by the linears.
  std::set<std::string> linear_tensors;
  for (const auto& named : linears_) {
    linear_tensors.insert(named.name + ".weight");
    linear_tensors.insert(named.name + ".bias");
  }
  for (auto& [name, t] : block_tensor_slots(out.weights_, layer_)) {
    if (!t->defined()) continue;
    if (linear_tensors.count(name) == 0)
      *t = cache.move(*t);
    else if (!keep_linear_sources)
      *t = at::Tensor();
  }
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

at::Tensor Block::mix(const at::Tensor& h, const ForwardContext& context, ForwardObserver* observer) const {
  switch (config_->mixer(layer_)) {
    case MixerKind::attention: return attention(h, context, observer);
    case MixerKind::mamba: return mamba(h, observer);
    case MixerKind::mamba2: return mamba2(h, observer);
  }
  fail("Block: unknown mixer kind");
}

at::Tensor Block::mixer_forward(const at::Tensor& h, const ForwardContext& context) const {
  return mix(h, context, nullptr);
}

at::Tensor Block::ffn_forward(const at::Tensor& h) const {
  switch (config_->ffn(layer_)) {
    case FfnKind::dense: return mlp(h);
    case FfnKind::moe: return moe(h, nullptr);
    case FfnKind::none: break;
  }
  fail("Block {}: this layer has no feed-forward", layer_);
}

Block Block::with_tensors(const std::map<std::string, at::Tensor>& replaced) const {
  BlockWeights w = weights_;  // shares every tensor; the slots below point into this copy
  std::set<std::string> changed_linears;
  std::set<std::string> known;
  for (auto& [name, slot] : block_tensor_slots(w, layer_)) {
    known.insert(name);
    const auto it = replaced.find(name);
    if (it == replaced.end()) continue;
    QEVAL_CHECK(slot->defined() && it->second.defined() && it->second.sizes() == slot->sizes(),
                "Block {}: replacing {}: expected a tensor of shape [{}], found {}", layer_, name,
                slot->defined() ? fmt::format("{}", fmt::join(slot->sizes(), ", ")) : std::string("(none in this block)"),
                it->second.defined() ? fmt::format("[{}]", fmt::join(it->second.sizes(), ", ")) : std::string("undefined"));
    *slot = it->second;
    changed_linears.insert(name.substr(0, name.rfind('.')));  // "layers.3.attn.v.bias" → "layers.3.attn.v"
  }
  for (const auto& [name, tensor] : replaced)
    QEVAL_CHECK(known.count(name) != 0, "Block {}: no tensor named {} to replace", layer_, name);
  Block out(config_, layer_, std::move(w), fmt::format("layer {} with replaced tensors", layer_));
  for (const NamedLinear& l : linears_)
    if (changed_linears.count(l.name) == 0) out.replace_linear(l.name, l.linear);
  out.kv_cache_ = kv_cache_;
  return out;
}

void Block::forward(at::Tensor& x, const ForwardContext& context, ForwardObserver* observer) const {
  const BlockWeights& b = weights_;
  const FfnKind ffn = config_->ffn(layer_);
  auto feed_forward = [&](const at::Tensor& h) { return ffn == FfnKind::moe ? moe(h, observer) : mlp(h); };
  if (config_->parallel_residual) {  // both branches read the block's input (NeoX)
    at::Tensor attn_out = mix(norm(x, b.attn_norm), context, observer);
    at::Tensor mlp_out = feed_forward(norm(x, b.mlp_norm));
    residual_add(x, attn_out);
    residual_add(x, mlp_out);
  } else if (config_->sandwich_norms) {  // each branch's output normed before its residual add (Gemma-3)
    residual_add(x, norm(mix(norm(x, b.attn_norm), context, observer), b.post_attn_norm));
    residual_add(x, norm(feed_forward(norm(x, b.mlp_norm)), b.post_mlp_norm));
  } else {
    residual_add(x, mix(norm(x, b.attn_norm), context, observer));
    if (ffn != FfnKind::none) residual_add(x, feed_forward(norm(x, b.mlp_norm)));
  }
}

}  // namespace qeval
