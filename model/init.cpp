#include "model/init.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

namespace qeval {

ModelWeights init_weights(const ModelConfig& c, std::uint64_t seed, double std) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto normal = [&](std::vector<std::int64_t> shape, double s) {
    return at::normal(0.0, s, shape, gen, at::TensorOptions().dtype(at::kFloat));
  };
  const std::int64_t D = c.d_model, hd = c.head_dim();
  const double residual_std = std / std::sqrt(2.0 * static_cast<double>(c.n_layers));
  auto linear = [&](std::int64_t out, std::int64_t in, bool bias, double s) {
    return LinearWeights{normal({out, in}, s), bias ? at::zeros({out}) : at::Tensor()};
  };
  auto norm = [&] {
    std::int64_t width = c.norm == NormKind::rmsnorm_single ? 1 : D;
    return NormWeights{at::ones({width}), c.norm == NormKind::layernorm ? at::zeros({D}) : at::Tensor()};
  };
  ModelWeights w;
  w.token_embedding = normal({c.vocab_size, D}, std);
  if (c.position == PositionKind::learned) w.position_embedding = normal({c.max_seq_len, D}, std / 2);
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    BlockWeights b;
    b.attn_norm = norm();
    if (c.fused_qkv) {
      b.qkv = linear((c.n_heads + 2 * c.n_kv_heads) * hd, D, c.has_qkv_bias(), std);
    } else {
      b.q = linear(c.n_heads * hd, D, c.has_qkv_bias(), std);
      b.k = linear(c.n_kv_heads * hd, D, c.has_qkv_bias(), std);
      b.v = linear(c.n_kv_heads * hd, D, c.has_qkv_bias(), std);
    }
    b.o = linear(D, c.n_heads * hd, c.attention_bias, residual_std);
    if (c.qk_norm) b.q_norm.weight = at::ones({hd}), b.k_norm.weight = at::ones({hd});
    if (c.sandwich_norms) b.post_attn_norm = norm(), b.post_mlp_norm = norm();
    b.mlp_norm = norm();
    if (c.fused_gate_up) {
      b.gate_up = linear(2 * c.d_ff, D, c.mlp_bias, std);
    } else {
      b.up = linear(c.d_ff, D, c.mlp_bias, std);
      if (c.gated_mlp()) b.gate = linear(c.d_ff, D, c.mlp_bias, std);
    }
    b.down = linear(D, c.d_ff, c.mlp_bias, residual_std);
    w.blocks.push_back(std::move(b));
  }
  w.final_norm = norm();
  w.lm_head = c.tied_embeddings ? w.token_embedding : normal({c.vocab_size, D}, std);
  return w;
}

ModelConfig gpt2_small_config() {
  ModelConfig c;
  c.architecture = "gpt2";
  c.vocab_size = 50257;
  c.d_model = 768;
  c.d_ff = 3072;
  c.n_layers = 12;
  c.n_heads = c.n_kv_heads = 12;
  c.max_seq_len = 1024;
  c.norm = NormKind::layernorm;
  c.position = PositionKind::learned;
  c.mlp = MlpKind::gelu;
  c.attention_bias = c.mlp_bias = c.tied_embeddings = c.fused_qkv = true;
  return c;
}

}  // namespace qeval
