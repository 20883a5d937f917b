#include "model/weights.h"

#include <fmt/ranges.h>

#include "common/error.h"

namespace qeval {
namespace {

std::string shape_of(const at::Tensor& t) {
  if (!t.defined()) return "missing";
  return fmt::format("[{}]", fmt::join(t.sizes(), ", "));
}

void expect(const at::Tensor& t, std::vector<std::int64_t> shape, const std::string& name, const std::string& source) {
  QEVAL_CHECK(t.defined(), "{}: tensor {} is missing (expected shape [{}])", source, name, fmt::join(shape, ", "));
  QEVAL_CHECK(t.scalar_type() == at::kFloat, "{}: tensor {} has dtype {}, expected float32 after loading", source, name,
              std::string(c10::toString(t.scalar_type())));
  QEVAL_CHECK(t.sizes().vec() == shape, "{}: tensor {} has shape {}, expected [{}]", source, name, shape_of(t),
              fmt::join(shape, ", "));
}

void expect_absent(const at::Tensor& t, const std::string& name, const std::string& source) {
  QEVAL_CHECK(!t.defined(), "{}: tensor {} is present but the config says it should not be", source, name);
}

void expect_linear(const LinearWeights& l, std::int64_t out, std::int64_t in, bool bias, const std::string& name,
                   const std::string& source) {
  expect(l.weight, {out, in}, name + ".weight", source);
  if (bias)
    expect(l.bias, {out}, name + ".bias", source);
  else
    expect_absent(l.bias, name + ".bias", source);
}

void expect_norm(const NormWeights& n, const ModelConfig& c, const std::string& name, const std::string& source) {
  std::int64_t width = c.norm == NormKind::rmsnorm_single ? 1 : c.d_model;
  expect(n.weight, {width}, name + ".weight", source);
  if (c.norm == NormKind::layernorm)
    expect(n.bias, {c.d_model}, name + ".bias", source);
  else
    expect_absent(n.bias, name + ".bias", source);
}

}  // namespace

void validate_weights(const ModelWeights& w, const ModelConfig& c, const std::string& source) {
  const std::int64_t D = c.d_model, hd = c.head_dim();
  expect(w.token_embedding, {c.vocab_size, D}, "token_embedding", source);
  if (c.position == PositionKind::learned)
    expect(w.position_embedding, {c.max_seq_len, D}, "position_embedding", source);
  QEVAL_CHECK(static_cast<std::int64_t>(w.blocks.size()) == c.n_layers, "{}: found {} blocks, config says {}", source,
              w.blocks.size(), c.n_layers);
  for (std::size_t i = 0; i < w.blocks.size(); ++i) {
    const auto& b = w.blocks[i];
    const std::string p = fmt::format("layers.{}.", i);
    expect_norm(b.attn_norm, c, p + "attn_norm", source);
    const bool qkv_bias = c.has_qkv_bias();
    if (c.fused_qkv) {
      expect_linear(b.qkv, (c.n_heads + 2 * c.n_kv_heads) * hd, D, qkv_bias, p + "attn.qkv", source);
    } else {
      expect_linear(b.q, c.n_heads * hd, D, qkv_bias, p + "attn.q", source);
      expect_linear(b.k, c.n_kv_heads * hd, D, qkv_bias, p + "attn.k", source);
      expect_linear(b.v, c.n_kv_heads * hd, D, qkv_bias, p + "attn.v", source);
    }
    expect_linear(b.o, D, c.n_heads * hd, c.attention_bias, p + "attn.o", source);
    for (auto [n, name] : {std::pair{&b.q_norm, "attn.q_norm"}, std::pair{&b.k_norm, "attn.k_norm"}}) {
      if (c.qk_norm) {
        expect(n->weight, {hd}, p + name + ".weight", source);
        expect_absent(n->bias, p + name + ".bias", source);
      } else {
        expect_absent(n->weight, p + name + ".weight", source);
      }
    }
    for (auto [n, name] : {std::pair{&b.post_attn_norm, "post_attn_norm"}, std::pair{&b.post_mlp_norm, "post_mlp_norm"}}) {
      if (c.sandwich_norms)
        expect_norm(*n, c, p + name, source);
      else
        expect_absent(n->weight, p + name + ".weight", source);
    }
    expect_norm(b.mlp_norm, c, p + "mlp_norm", source);
    if (c.fused_gate_up) {
      expect_linear(b.gate_up, 2 * c.d_ff, D, c.mlp_bias, p + "mlp.gate_up", source);
      expect_absent(b.up.weight, p + "mlp.up.weight", source);
      expect_absent(b.gate.weight, p + "mlp.gate.weight", source);
    } else {
      expect_linear(b.up, c.d_ff, D, c.mlp_bias, p + "mlp.up", source);
      if (c.gated_mlp()) expect_linear(b.gate, c.d_ff, D, c.mlp_bias, p + "mlp.gate", source);
      expect_absent(b.gate_up.weight, p + "mlp.gate_up.weight", source);
    }
    expect_linear(b.down, D, c.d_ff, c.mlp_bias, p + "mlp.down", source);
    if (b.down_input_rotation.defined()) expect(b.down_input_rotation, {c.d_ff, c.d_ff}, p + "mlp.down_input_rotation", source);
  }
  expect_norm(w.final_norm, c, "final_norm", source);
  expect(w.lm_head, {c.vocab_size, D}, "lm_head", source);
  if (w.lm_head_bias.defined()) expect(w.lm_head_bias, {c.vocab_size}, "lm_head_bias", source);
}

}  // namespace qeval
