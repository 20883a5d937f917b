// Transformer: one forward pass for every supported family (GPT-2, Llama, Qwen2/3, Mistral,
// Gemma-3, Phi-3, GPT-NeoX, OPT), driven by ModelConfig's switches. Every projection runs through a Linear, named canonically, so quant/ can rewrite
// them; an optional ForwardObserver sees hidden states and (when it asks) attention.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/linear.h"
#include "model/observer.h"
#include "model/placement.h"
#include "model/weights.h"

namespace qeval {

struct NamedLinear {
  std::string name;  // layers.{i}.attn.{qkv|q|k|v|o}, layers.{i}.mlp.{up|gate|gate_up|down}, lm_head
  std::shared_ptr<const Linear> linear;
};

class Transformer {
 public:
  // Validates the weights against the config (throws naming `source`) and wraps every linear
  // weight in a FloatLinear. Copies are cheap and share all tensors.
  Transformer(ModelConfig config, ModelWeights weights, const std::string& source = "model");

  // tokens: [B, L] int64 with positions 0..L-1 (any device) → logits [B, L, V] in the compute
  // dtype, on the model's device.
  at::Tensor forward(const at::Tensor& tokens, ForwardObserver* observer = nullptr) const;

  // This model on the cache's device and dtype (model/placement.h): embeddings, norms and every
  // linear placed through the cache, so models placed with one cache share what they share here.
  // The placed model's weights() holds the placed embeddings and norms; its linear weights are
  // those of its linears().
  Transformer placed(PlacementCache& cache) const;
  at::Device device() const { return weights_.token_embedding.device(); }

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }

  // Every linear in execution order (blocks first, lm_head last).
  const std::vector<NamedLinear>& linears() const { return linears_; }
  // Routes the named projection through `replacement` (same in/out features); throws with
  // the valid names when `name` is unknown.
  void replace_linear(const std::string& name, std::shared_ptr<const Linear> replacement);
  // Bytes of all linear weights as stored for execution (blocks + lm_head).
  std::int64_t linear_weight_bytes() const;

 private:
  struct BlockLinears {
    int qkv = -1, q = -1, k = -1, v = -1, o = -1, up = -1, gate = -1, gate_up = -1, down = -1;  // indices into linears_
  };
  // What every layer's attention shares within one forward pass, computed once per pass: one
  // rotary table per RoPE base and one mask per attention window that some layer uses.
  struct RopeTable {
    double theta = 0;
    at::Tensor cos, sin;  // [L, rotary_dims/2] rotary angles in the compute dtype
  };
  struct MaskTable {
    std::int64_t window = 0;  // 0: plain causal
    at::Tensor bias;          // [L, L]: 0 where query i sees key j, -inf elsewhere
  };
  struct PositionTables {
    std::vector<RopeTable> rope;  // rope positions only
    std::vector<MaskTable> masks;
    const RopeTable& rope_for(double theta) const;
    const at::Tensor& mask_for(std::int64_t window) const;
  };
  PositionTables position_tables(std::int64_t L, const at::Tensor& like) const;
  // One block: pre-norm residual (GPT-2, Llama), with sandwich norms (Gemma-3) or parallel (NeoX).
  void block(std::int64_t layer, at::Tensor& x, const PositionTables& tables, ForwardObserver* observer) const;
  at::Tensor attention(std::int64_t layer, const at::Tensor& h, const PositionTables& tables, ForwardObserver* observer) const;
  at::Tensor mlp(std::int64_t layer, const at::Tensor& h) const;
  // LibTorch's fused causal attention (scaled_dot_product_attention) runs here: LibTorch ≥ 2.1 on a GPU.
  static bool fused_attention_available(const at::Tensor& q);
  // q, k, v [B, H, L, hd] (k, v already repeated for grouped-query), scores scaled by `scale` → [B, L, H·hd].
  static at::Tensor fused_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale);
  at::Tensor norm(const at::Tensor& x, const NormWeights& w) const;
  // RMSNorm over the last axis with gains `w` (the per-head q/k norms: x [B, H, L, hd], w [hd]).
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w) const;
  at::Tensor apply_rope(const at::Tensor& x /*[B, H, L, hd]*/, const RopeTable& table) const;
  const Linear& linear(int index) const { return *linears_[static_cast<std::size_t>(index)].linear; }

  ModelConfig config_;
  ModelWeights weights_;
  std::vector<NamedLinear> linears_;
  std::vector<BlockLinears> blocks_;
  int lm_head_ = -1;
};

// Softmax-1 over the last axis: exp(x_i) / (1 + Σ_j exp(x_j)), computed with
// m = max(0, max_j x_j) so neither term overflows. Entries of -inf contribute nothing.
at::Tensor softmax1(const at::Tensor& scores);

}  // namespace qeval
