#include "transforms/fold_norms.h"

#include <vector>

#include "common/error.h"

#include "transforms/weight_math.h"

namespace qeval {
namespace {

// Readers of one norm's output with the norm's gain and bias folded in.
void fold_into_readers(const NormWeights& norm, const std::vector<LinearWeights*>& readers, bool layernorm) {
  at::Tensor g = f64(norm.weight);  // [D] or [1]
  for (LinearWeights* r : readers) {
    at::Tensor w = f64(r->weight);
    if (layernorm) {
      at::Tensor b = r->bias.defined() ? f64(r->bias) : at::zeros({w.size(0)}, at::kDouble);
      r->bias = f32(b + at::matmul(w, f64(norm.bias)));
    }
    r->weight = f32(w * g.unsqueeze(0));
  }
}

// x − mean_d(x) on every row a writer adds to the residual stream: subtract the column means.
at::Tensor centered_rows(const at::Tensor& t /*[N, D]*/) {
  at::Tensor x = f64(t);
  return f32(x - x.mean(1, /*keepdim=*/true));
}
LinearWeights centered_writer(const LinearWeights& l /*[D, in]*/) {
  at::Tensor w = f64(l.weight);
  LinearWeights out{f32(w - w.mean(0, /*keepdim=*/true)), at::Tensor()};
  if (l.bias.defined()) out.bias = f32(f64(l.bias) - f64(l.bias).mean());
  return out;
}

}  // namespace

nlohmann::json fold_norms(ModelConfig& config, ModelWeights& weights) {
  // Only the input norms fold; a norm on a branch's output (Gemma-3's sandwich) sits between the
  // residual writer and the residual stream, where its gain does not commute with a rotation.
  QEVAL_CHECK(!config.sandwich_norms,
              "fold_norms: cannot fold sandwich norms (post-attention / post-MLP norms, Gemma-3): their gains act on "
              "the residual side after normalisation, where a rotation of the residual stream would need a dense "
              "matrix; rotate refuses this model");
  const bool layernorm = config.norm == NormKind::layernorm;
  nlohmann::json report = {{"norm_before", to_string(config.norm)},
                           {"centered_residual_stream", layernorm},
                           {"added_biases", nlohmann::json::array()},
                           {"untied_embeddings", config.tied_embeddings}};
  if (layernorm) {
    weights.token_embedding = centered_rows(weights.token_embedding);
    if (weights.position_embedding.defined()) weights.position_embedding = centered_rows(weights.position_embedding);
    for (auto& b : weights.blocks) {
      b.o = centered_writer(b.o);
      b.down = centered_writer(b.down);
    }
    // β becomes a bias of every reader: give the layers of a kind without biases zero biases.
    auto add_biases = [&](bool& flag, const std::string& kind, auto&& layers_of) {
      if (flag) return;
      flag = true;
      report["added_biases"].push_back(kind);
      for (auto& b : weights.blocks)
        for (LinearWeights* l : layers_of(b))
          if (l->weight.defined() && !l->bias.defined()) l->bias = at::zeros({l->weight.size(0)}, at::kFloat);
    };
    add_biases(config.attention_bias, "attention", [](BlockWeights& b) { return std::vector<LinearWeights*>{&b.qkv, &b.q, &b.k, &b.v, &b.o}; });
    add_biases(config.mlp_bias, "mlp", [](BlockWeights& b) { return std::vector<LinearWeights*>{&b.up, &b.gate, &b.gate_up, &b.down}; });
  }
  for (auto& b : weights.blocks) {
    std::vector<LinearWeights*> attn_readers;
    for (LinearWeights* l : {&b.qkv, &b.q, &b.k, &b.v})
      if (l->weight.defined()) attn_readers.push_back(l);
    fold_into_readers(b.attn_norm, attn_readers, layernorm);
    std::vector<LinearWeights*> mlp_readers;
    for (LinearWeights* l : {&b.up, &b.gate, &b.gate_up})
      if (l->weight.defined()) mlp_readers.push_back(l);
    fold_into_readers(b.mlp_norm, mlp_readers, layernorm);
  }
  LinearWeights head{weights.lm_head, weights.lm_head_bias};
  fold_into_readers(weights.final_norm, {&head}, layernorm);
  weights.lm_head = head.weight;
  weights.lm_head_bias = head.bias;
  config.tied_embeddings = false;

  // Every norm is now gain 1 (and RMSNorm for what was LayerNorm).
  const std::int64_t width = config.norm == NormKind::rmsnorm_single ? 1 : config.d_model;
  if (layernorm) config.norm = NormKind::rmsnorm;
  auto unit = [&] { return NormWeights{at::ones({width}, at::kFloat), at::Tensor()}; };
  for (auto& b : weights.blocks) b.attn_norm = unit(), b.mlp_norm = unit();
  weights.final_norm = unit();
  return report;
}

}  // namespace qeval
