// Block: one layer of the model, a mixer and an MLP between norms (DESIGN.md §3), with its own
// weights and linears. The transformer is an embedding, a sequence of blocks and a head; the
// layer-major evaluator (eval/evaluator.h) builds, quantises and runs blocks one layer at a time,
// so a block is self-contained: it needs only the config, its weights and the pass's context.
//
// The config's layer pattern says which mixer (attention, Mamba, Mamba-2) and which feed-forward
// (dense MLP, mixture of experts, none) this layer has; each kind is one member function in its own
// file (attention.cpp, mamba_mixer.cpp, mamba2_mixer.cpp, dense_mlp.cpp, moe_mlp.cpp), so the
// forward, the layer-major plan, the observers and quantisation serve every kind alike.
//
// Every projection is a Linear named canonically (layers.{i}.attn.{qkv|q|k|v|o},
// layers.{i}.mlp.{up|gate|gate_up|down}, layers.{i}.moe.experts.{e}.{gate|up|down},
// layers.{i}.moe.shared.{gate|up|down}, layers.{i}.mamba.{in_proj|x_proj|dt_proj|out_proj}) so quant/
// can rewrite it. Routers, convolutions, the scan's parameters and norms are tensors, not Linears:
// they stay full precision (DESIGN.md §5). An observer sees the attention probabilities, the
// router's choices and Mamba-2's implicit attention when it asks (the hidden state after the
// block is the caller's to hand).
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/forward_context.h"
#include "model/kv_cache_hook.h"
#include "model/linear.h"
#include "model/observer.h"
#include "model/weights.h"

namespace qeval {

class PlacementCache;

struct NamedLinear {
  std::string name;  // layers.{i}.attn.q, layers.{i}.mlp.up, layers.{i}.moe.experts.{e}.up, ..., lm_head
  std::shared_ptr<const Linear> linear;
};

// The canonical names of a layer's linears in execution order (what Block::linears() holds).
std::vector<std::string> block_linear_names(const ModelConfig& config, std::int64_t layer);
// The shape of the linear called `name` (an entry of block_linear_names, or "lm_head").
struct LinearShape {
  std::int64_t out = 0, in = 0;
  bool bias = false;
};
LinearShape linear_shape(const ModelConfig& config, const std::string& name);
// Every linear of the model in execution order: each layer's, then "lm_head".
std::vector<std::string> model_linear_names(const ModelConfig& config);

class Block {
 public:
  // Validates the weights against the config (throws naming `source`, the tensor and both shapes)
  // and wraps every linear weight in a FloatLinear. Copies are cheap and share all tensors.
  // `weight_max_abs`: max |tensor| by tensor name (named_tensors' names) of the tensors `weights`
  // holds now, as the read's finiteness check found them; each linear's FloatLinear carries its own.
  Block(std::shared_ptr<const ModelConfig> config, std::int64_t layer, BlockWeights weights,
        const std::string& source = "model", const std::map<std::string, float>& weight_max_abs = {});

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
  // This block with some of its tensors replaced (named_tensors' names, each the same shape as the
  // one it replaces): a linear whose weight or bias is replaced becomes a FloatLinear of the new
  // tensors; every other linear (a replaced one included) and the kv cache are kept. Throws naming
  // a name the block does not hold, or a shape that differs. (AWQ's folded norms, quant/rewrite.h.)
  Block with_tensors(const std::map<std::string, at::Tensor>& replaced) const;
  // The mixer (attention, Mamba, Mamba-2) on a normed input h [B, L, D] → [B, L, D], and the
  // feed-forward (dense MLP, MoE) on a normed input, exactly as forward() runs them between its
  // norms and residual adds, with no observer: the parents whose outputs AWQ's search compares
  // (eval/awq_layer.h).
  at::Tensor mixer_forward(const at::Tensor& h, const ForwardContext& context) const;
  at::Tensor ffn_forward(const at::Tensor& h) const;
  // This block on the cache's device and dtype (norms and every linear placed through the cache).
  // The placed block's weights() still hold the source's linear weights (a placed model can be
  // saved as it was read) unless `keep_linear_sources` is false: then they are left undefined,
  // and the placed linears hold the only reference (an evaluation's kept blocks, which must not
  // keep their float32 source alive beside them).
  Block placed(PlacementCache& cache, bool keep_linear_sources = true) const;
  std::int64_t linear_weight_bytes() const;
  // A scheme's key/value cache quantiser (model/kv_cache_hook.h), applied by attention layers; null
  // (the default): K and V are read in the block's own precision. Copies and placed() share it.
  void set_kv_cache(std::shared_ptr<const KvCacheQuantizer> kv_cache) { kv_cache_ = std::move(kv_cache); }
  const std::shared_ptr<const KvCacheQuantizer>& kv_cache() const { return kv_cache_; }

 public:
  // Where each projection sits in linears() (-1: not in this block); for the kinds' forwards.
  struct ExpertSlots {
    int gate = -1, up = -1, down = -1;
  };
  struct LinearSlots {  // indices into linears_
    int qkv = -1, q = -1, k = -1, v = -1, o = -1, up = -1, gate = -1, gate_up = -1, down = -1;
    int in_proj = -1, x_proj = -1, dt_proj = -1, out_proj = -1;
    std::vector<ExpertSlots> experts;
    ExpertSlots shared;
  };

 private:
  // The mixer of this layer's kind on the normed input h [B, L, D] → [B, L, D].
  at::Tensor mix(const at::Tensor& h, const ForwardContext& context, ForwardObserver* observer) const;
  // model/attention.cpp
  at::Tensor attention(const at::Tensor& h, const ForwardContext& context, ForwardObserver* observer) const;
  // model/mamba_mixer.cpp
  at::Tensor mamba(const at::Tensor& h, ForwardObserver* observer) const;
  // model/mamba2_mixer.cpp
  at::Tensor mamba2(const at::Tensor& h, ForwardObserver* observer) const;
  // model/dense_mlp.cpp
  at::Tensor mlp(const at::Tensor& h) const;
  at::Tensor gated_mlp(const ExpertSlots& slots, const at::Tensor& h) const;  // down(act(gate h) · up h)
  // model/moe_mlp.cpp
  at::Tensor moe(const at::Tensor& h, ForwardObserver* observer) const;
  at::Tensor norm(const at::Tensor& x, const NormWeights& w) const;
  const Linear& linear(int index) const { return *linears_[static_cast<std::size_t>(index)].linear; }

  std::shared_ptr<const ModelConfig> config_;
  std::int64_t layer_ = 0;
  BlockWeights weights_;
  std::vector<NamedLinear> linears_;
  LinearSlots slots_;
  std::shared_ptr<const KvCacheQuantizer> kv_cache_;
};

}  // namespace qeval
