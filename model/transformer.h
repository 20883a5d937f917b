// Transformer: one forward pass for every supported family (GPT-2, Llama, Qwen2/3, Mistral,
// Gemma-3, Phi-3, GPT-NeoX, OPT), driven by ModelConfig's switches: an embedding, a sequence of
// Blocks (model/block.h) and a head. Every projection runs through a Linear, named canonically,
// so quant/ can rewrite them; an optional ForwardObserver sees hidden states and (when it asks)
// attention. The stages (embed, blocks, head_input, logits) are public so that the layer-major
// evaluator (eval/evaluator.h) can run them in its own order; forward() runs them in sequence.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "model/block.h"
#include "model/config.h"
#include "model/forward_context.h"
#include "model/linear.h"
#include "model/observer.h"
#include "model/placement.h"
#include "model/weights.h"

namespace qeval {

class Transformer {
 public:
  // Validates the config and the weights (throws naming `source`) and wraps every linear
  // weight in a FloatLinear. Copies are cheap and share all tensors.
  Transformer(ModelConfig config, ModelWeights weights, const std::string& source = "model");

  // tokens: [B, L] int64 with positions 0..L-1 (any device) → logits [B, L, V] in the compute
  // dtype, on the model's device.
  at::Tensor forward(const at::Tensor& tokens, ForwardObserver* observer = nullptr) const;

  // The stages of forward(), in its order:
  // tokens [B, L] → the residual stream before block 0, [B, L, D] (a tensor of its own).
  at::Tensor embed(const at::Tensor& tokens) const;
  const std::vector<Block>& blocks() const { return blocks_; }
  // x [B, L, D] after the last block → the LM head's input (the final norm).
  at::Tensor head_input(const at::Tensor& x) const;
  // The LM head's input → logits [B, L, V] (with the final soft cap).
  at::Tensor logits(const at::Tensor& head_input) const;
  const std::shared_ptr<const Linear>& lm_head() const { return linears_.back().linear; }

  // This model on the cache's device and dtype (model/placement.h): embeddings, norms and every
  // linear placed through the cache, so models placed with one cache share what they share here.
  // The placed model's weights() holds the placed embeddings and norms; its linear weights are
  // those of its linears().
  Transformer placed(PlacementCache& cache) const;
  at::Device device() const { return weights_.token_embedding.device(); }

  const ModelConfig& config() const { return *config_; }
  const std::shared_ptr<const ModelConfig>& shared_config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }

  // Every linear in execution order (blocks first, lm_head last).
  const std::vector<NamedLinear>& linears() const { return linears_; }
  // Routes the named projection through `replacement` (same in/out features); throws with
  // the valid names when `name` is unknown.
  void replace_linear(const std::string& name, std::shared_ptr<const Linear> replacement);
  // Puts `block` in place of the model's block of its layer (its weights and linears alike: a
  // scheme's block whose norms a calibration replaced, quant/rewrite.h).
  void replace_block(Block block);
  // Every attention layer reads its K and V through `kv_cache` (model/kv_cache_hook.h; null: none).
  void set_kv_cache(const std::shared_ptr<const KvCacheQuantizer>& kv_cache);
  // Bytes of all linear weights as stored for execution (blocks + lm_head).
  std::int64_t linear_weight_bytes() const;

 private:
  Transformer() = default;
  void collect_linears();  // linears_ from the blocks and the head

  std::shared_ptr<const ModelConfig> config_;
  ModelWeights weights_;  // embeddings, final norm, head; blocks_[i].weights() mirrored in weights_.blocks[i]
  std::vector<Block> blocks_;
  std::shared_ptr<const Linear> head_;
  std::vector<NamedLinear> linears_;
};

// Softmax-1 over the last axis: exp(x_i) / (1 + Σ_j exp(x_j)), computed with
// m = max(0, max_j x_j) so neither term overflows. Entries of -inf contribute nothing.
at::Tensor softmax1(const at::Tensor& scores);

// The model's token embedding of `tokens` [B, L] from `table` ([V, D] rows, or the rows a reader
// gave) with the config's scaling and learned positions: the residual stream before block 0.
// `rows` [B·L, D] are the embedding rows of the tokens in order.
at::Tensor embedding_stream(const at::Tensor& rows, std::int64_t B, std::int64_t L, const ModelConfig& config,
                            const at::Tensor& position_embedding);

// The final logit soft cap of the config (Gemma-2), or `logits` unchanged.
at::Tensor final_soft_cap(const at::Tensor& logits, const ModelConfig& config);

// Checks tokens [B, L] against the vocabulary and the learned positions; throws naming the first bad id.
void check_tokens(const at::Tensor& tokens, const ModelConfig& config);

}  // namespace qeval
