#include "model/transformer.h"

#include "common/error.h"
#include "model/norms.h"

namespace qeval {

at::Tensor softmax1(const at::Tensor& scores) {
  // The shift m cancels exactly (the result is e^x / (1 + Σe^x) for any m), so its gradient is zero
  // and it is detached: autograd then skips amax's backward over the [.., L, L] scores. The forward
  // is the same expression, so evaluation numbers do not move.
  at::Tensor m = scores.detach().amax(-1, /*keepdim=*/true).clamp_min(0);
  at::Tensor e = (scores - m).exp();
  return e / ((-m).exp() + e.sum(-1, /*keepdim=*/true));
}

Transformer::Transformer(ModelConfig config, ModelWeights weights, const std::string& source)
    : config_(std::make_shared<const ModelConfig>(std::move(config))), weights_(std::move(weights)) {
  config_->validate(source);
  validate_weights(weights_, *config_, source);
  blocks_.reserve(weights_.blocks.size());
  for (std::int64_t i = 0; i < config_->n_layers; ++i)
    blocks_.emplace_back(config_, i, weights_.blocks[static_cast<std::size_t>(i)], source);
  head_ = std::make_shared<FloatLinear>(weights_.lm_head, weights_.lm_head_bias);
  collect_linears();
}

void Transformer::collect_linears() {
  linears_.clear();
  for (const auto& b : blocks_)
    for (const auto& named : b.linears()) linears_.push_back(named);
  linears_.push_back({"lm_head", head_});
}

Transformer Transformer::placed(PlacementCache& cache) const {
  Transformer out = *this;
  ModelWeights& w = out.weights_;
  w.token_embedding = cache.move(w.token_embedding);
  w.position_embedding = cache.move(w.position_embedding);
  w.final_norm.weight = cache.move(w.final_norm.weight);
  w.final_norm.bias = cache.move(w.final_norm.bias);
  for (std::size_t i = 0; i < out.blocks_.size(); ++i) {
    out.blocks_[i] = blocks_[i].placed(cache);
    // The placed block's norms, router and scan parameters; its linear weights are the CPU's (the
    // placed copies live in its linears).
    w.blocks[i] = out.blocks_[i].weights();
  }
  out.head_ = head_->placed(cache);
  out.collect_linears();
  return out;
}

void Transformer::set_kv_cache(const std::shared_ptr<const KvCacheQuantizer>& kv_cache) {
  for (auto& block : blocks_)
    if (block.config().mixer(block.layer()) == MixerKind::attention) block.set_kv_cache(kv_cache);
}

void Transformer::replace_block(Block block) {
  const std::int64_t layer = block.layer();
  QEVAL_CHECK(layer >= 0 && layer < static_cast<std::int64_t>(blocks_.size()),
              "replace_block: layer {} outside the model's {} layers", layer, blocks_.size());
  const auto i = static_cast<std::size_t>(layer);
  weights_.blocks[i] = block.weights();
  blocks_[i] = std::move(block);
  collect_linears();
}

void Transformer::replace_linear(const std::string& name, std::shared_ptr<const Linear> replacement) {
  QEVAL_CHECK(replacement != nullptr, "replace_linear: null replacement for {}", name);
  if (name == "lm_head") {
    QEVAL_CHECK(replacement->in_features() == head_->in_features() && replacement->out_features() == head_->out_features(),
                "replace_linear: lm_head is [{} -> {}], replacement is [{} -> {}]", head_->in_features(),
                head_->out_features(), replacement->in_features(), replacement->out_features());
    head_ = std::move(replacement);
    collect_linears();
    return;
  }
  for (auto& block : blocks_) {
    if (block.replace_linear(name, replacement)) {
      collect_linears();
      return;
    }
  }
  std::string valid;
  for (const auto& named : linears_) valid += (valid.empty() ? "" : ", ") + named.name;
  fail("replace_linear: no linear named '{}'; the model has {}", name, valid);
}

std::int64_t Transformer::linear_weight_bytes() const {
  std::int64_t total = 0;
  for (const auto& named : linears_) total += named.linear->weight_bytes();
  return total;
}

void check_tokens(const at::Tensor& tokens, const ModelConfig& config) {
  TORCH_CHECK(tokens.dim() == 2, "Transformer::forward: tokens must be [B, L], got ", tokens.dim(), " dims");
  const std::int64_t L = tokens.size(1);
  if (config.position == PositionKind::learned)
    QEVAL_CHECK(L <= config.max_seq_len, "Transformer::forward: window of {} tokens exceeds the model's {} learned positions",
                L, config.max_seq_len);
  if (tokens.numel() > 0) {
    std::int64_t lo = tokens.min().item<std::int64_t>(), hi = tokens.max().item<std::int64_t>();
    QEVAL_CHECK(lo >= 0 && hi < config.vocab_size, "Transformer::forward: token id {} outside the vocabulary of {}",
                lo < 0 ? lo : hi, config.vocab_size);
  }
}

at::Tensor embedding_stream(const at::Tensor& rows, std::int64_t B, std::int64_t L, const ModelConfig& config,
                            const at::Tensor& position_embedding) {
  at::Tensor x = rows.reshape({B, L, -1});
  // The scale is rounded to the compute dtype first, as HF Gemma does (a 0-dim tensor of x's dtype).
  if (config.embedding_scale != 1.0) x = x * at::scalar_tensor(config.embedding_scale, x.options());
  if (config.position == PositionKind::learned) x = x + position_embedding.narrow(0, 0, L);
  return x;
}

at::Tensor final_soft_cap(const at::Tensor& logits, const ModelConfig& config) {
  const double cap = config.final_logit_softcap;
  return cap > 0 ? at::tanh(logits / cap) * cap : logits;
}

at::Tensor Transformer::embed(const at::Tensor& tokens) const {
  check_tokens(tokens, *config_);
  const at::Tensor ids = tokens.to(weights_.token_embedding.device()).reshape({-1});
  return embedding_stream(weights_.token_embedding.index_select(0, ids), tokens.size(0), tokens.size(1), *config_,
                          weights_.position_embedding);
}

at::Tensor Transformer::head_input(const at::Tensor& x) const { return apply_norm(x, weights_.final_norm, *config_); }

at::Tensor Transformer::logits(const at::Tensor& head_input) const {
  return final_soft_cap(head_->forward(head_input), *config_);
}

at::Tensor Transformer::forward(const at::Tensor& tokens, ForwardObserver* observer) const {
  at::Tensor x = embed(tokens);
  const ForwardContext context = make_forward_context(*config_, tokens.size(1), x);
  for (const Block& block : blocks_) {
    block.forward(x, context, observer);
    if (observer) observer->on_block_output(block.layer(), x);
  }
  return logits(head_input(x));
}

}  // namespace qeval
