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

void validate_block_weights(const BlockWeights& b, const ModelConfig& c, std::int64_t layer, const std::string& source) {
  const std::int64_t D = c.d_model, hd = c.head_dim();
  const std::string p = fmt::format("layers.{}.", layer);
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

void validate_head_weights(const ModelWeights& w, const ModelConfig& c, const std::string& source) {
  expect_norm(w.final_norm, c, "final_norm", source);
  expect(w.lm_head, {c.vocab_size, c.d_model}, "lm_head", source);
  if (w.lm_head_bias.defined()) expect(w.lm_head_bias, {c.vocab_size}, "lm_head_bias", source);
}

void validate_weights(const ModelWeights& w, const ModelConfig& c, const std::string& source) {
  const std::int64_t D = c.d_model;
  expect(w.token_embedding, {c.vocab_size, D}, "token_embedding", source);
  if (c.position == PositionKind::learned)
    expect(w.position_embedding, {c.max_seq_len, D}, "position_embedding", source);
  QEVAL_CHECK(static_cast<std::int64_t>(w.blocks.size()) == c.n_layers, "{}: found {} blocks, config says {}", source,
              w.blocks.size(), c.n_layers);
  for (std::size_t i = 0; i < w.blocks.size(); ++i) validate_block_weights(w.blocks[i], c, static_cast<std::int64_t>(i), source);
  validate_head_weights(w, c, source);
}

std::vector<std::pair<std::string, at::Tensor>> named_tensors(const BlockWeights& b, std::int64_t layer) {
  const std::string p = fmt::format("layers.{}.", layer);
  std::vector<std::pair<std::string, at::Tensor>> out;
  auto norm = [&](const char* name, const NormWeights& n) {
    out.emplace_back(p + name + ".weight", n.weight);
    out.emplace_back(p + name + ".bias", n.bias);
  };
  auto linear = [&](const char* name, const LinearWeights& l) {
    out.emplace_back(p + name + ".weight", l.weight);
    out.emplace_back(p + name + ".bias", l.bias);
  };
  norm("attn_norm", b.attn_norm);
  linear("attn.qkv", b.qkv);
  linear("attn.q", b.q);
  linear("attn.k", b.k);
  linear("attn.v", b.v);
  linear("attn.o", b.o);
  norm("attn.q_norm", b.q_norm);
  norm("attn.k_norm", b.k_norm);
  norm("post_attn_norm", b.post_attn_norm);
  norm("mlp_norm", b.mlp_norm);
  linear("mlp.up", b.up);
  linear("mlp.gate", b.gate);
  linear("mlp.gate_up", b.gate_up);
  norm("post_mlp_norm", b.post_mlp_norm);
  linear("mlp.down", b.down);
  out.emplace_back(p + "mlp.down_input_rotation", b.down_input_rotation);
  std::vector<std::pair<std::string, at::Tensor>> defined;
  for (auto& entry : out)
    if (entry.second.defined()) defined.push_back(std::move(entry));
  return defined;
}

void check_finite(const at::Tensor& t, const std::string& name, const std::string& source) {
  if (!t.defined() || t.is_meta() || !at::isFloatingType(t.scalar_type())) return;
  const at::Tensor bad = t.isfinite().logical_not();
  if (!bad.any().item<bool>()) return;
  std::int64_t flat = bad.reshape({-1}).nonzero().select(1, 0)[0].item<std::int64_t>();
  const double value = t.reshape({-1})[flat].item<double>();
  std::vector<std::int64_t> index(static_cast<std::size_t>(t.dim()));
  for (std::int64_t d = t.dim() - 1; d >= 0; --d) {
    index[static_cast<std::size_t>(d)] = flat % t.size(d);
    flat /= t.size(d);
  }
  fail("{}: tensor {} holds a non-finite value: {} at index [{}]; a model with NaN or infinite weights yields no "
       "number",
       source, name, value, fmt::join(index, ", "));
}

}  // namespace qeval
