#include "model/weights.h"

#include <ATen/Parallel.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "kernels/cpu/int8_quantize_cpu.h"

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

namespace {

void validate_attention(const BlockWeights& b, const ModelConfig& c, const std::string& p, const std::string& source) {
  const std::int64_t D = c.d_model, hd = c.head_dim();
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
}

void validate_ssm(const SsmWeights& s, const ModelConfig& c, MixerKind kind, const std::string& p,
                  const std::string& source) {
  const std::int64_t D = c.d_model, E = c.ssm_d_inner, N = c.ssm_d_state, conv = c.ssm_conv_dim(kind);
  const std::string m = p + "mamba.";
  auto gains = [&](const NormWeights& n, std::int64_t width, const std::string& name) {
    expect(n.weight, {width}, m + name + ".weight", source);
    expect_absent(n.bias, m + name + ".bias", source);
  };
  expect(s.conv_weight, {conv, c.ssm_d_conv}, m + "conv.weight", source);
  if (c.ssm_conv_bias)
    expect(s.conv_bias, {conv}, m + "conv.bias", source);
  else
    expect_absent(s.conv_bias, m + "conv.bias", source);
  expect_linear(s.out_proj, D, E, c.ssm_proj_bias, m + "out_proj", source);
  if (kind == MixerKind::mamba) {
    const std::int64_t R = c.ssm_dt_rank;
    expect_linear(s.in_proj, 2 * E, D, c.ssm_proj_bias, m + "in_proj", source);
    expect_linear(s.x_proj, R + 2 * N, E, false, m + "x_proj", source);
    expect_linear(s.dt_proj, E, R, true, m + "dt_proj", source);
    expect(s.A, {E, N}, m + "A", source);
    expect(s.D, {E}, m + "D", source);
    expect_absent(s.dt_bias, m + "dt_bias", source);
    expect_absent(s.norm.weight, m + "norm.weight", source);
    if (c.ssm_bcdt_norm) {
      gains(s.dt_norm, R, "dt_norm");
      gains(s.b_norm, N, "b_norm");
      gains(s.c_norm, N, "c_norm");
    } else {
      for (auto [n, name] : {std::pair{&s.dt_norm, "dt_norm"}, std::pair{&s.b_norm, "b_norm"}, std::pair{&s.c_norm, "c_norm"}})
        expect_absent(n->weight, m + name + ".weight", source);
    }
  } else {
    const std::int64_t H = c.ssm_heads;
    expect_linear(s.in_proj, E + conv + H, D, c.ssm_proj_bias, m + "in_proj", source);
    expect_absent(s.x_proj.weight, m + "x_proj.weight", source);
    expect_absent(s.dt_proj.weight, m + "dt_proj.weight", source);
    expect(s.A, {H}, m + "A", source);
    expect(s.D, {H}, m + "D", source);
    expect(s.dt_bias, {H}, m + "dt_bias", source);
    gains(s.norm, E, "norm");
  }
}

void validate_moe(const MoeWeights& w, const ModelConfig& c, const std::string& p, const std::string& source) {
  const std::int64_t D = c.d_model, F = c.expert_d_ff(), S = c.moe_shared_d_ff;
  expect(w.router, {c.moe_experts, D}, p + "moe.router.weight", source);
  QEVAL_CHECK(static_cast<std::int64_t>(w.experts.size()) == c.moe_experts, "{}: {}moe has {} experts, the config says {}",
              source, p, w.experts.size(), c.moe_experts);
  for (std::size_t e = 0; e < w.experts.size(); ++e) {
    const std::string x = fmt::format("{}moe.experts.{}.", p, e);
    expect_linear(w.experts[e].gate, F, D, c.mlp_bias, x + "gate", source);
    expect_linear(w.experts[e].up, F, D, c.mlp_bias, x + "up", source);
    expect_linear(w.experts[e].down, D, F, c.mlp_bias, x + "down", source);
  }
  if (S > 0) {
    expect_linear(w.shared.gate, S, D, c.mlp_bias, p + "moe.shared.gate", source);
    expect_linear(w.shared.up, S, D, c.mlp_bias, p + "moe.shared.up", source);
    expect_linear(w.shared.down, D, S, c.mlp_bias, p + "moe.shared.down", source);
  } else {
    expect_absent(w.shared.up.weight, p + "moe.shared.up.weight", source);
  }
  if (c.moe_shared_gate)
    expect(w.shared_gate, {1, D}, p + "moe.shared_gate.weight", source);
  else
    expect_absent(w.shared_gate, p + "moe.shared_gate.weight", source);
}

void validate_dense_mlp(const BlockWeights& b, const ModelConfig& c, const std::string& p, const std::string& source) {
  const std::int64_t D = c.d_model;
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

// Every tensor whose canonical name starts with one of `prefixes` (after "layers.{i}.") must be undefined.
void expect_none_of(const BlockWeights& b, std::int64_t layer, const std::vector<std::string>& prefixes,
                    const std::string& why, const std::string& source) {
  const std::string p = fmt::format("layers.{}.", layer);
  for (const auto& [name, t] : named_tensors(b, layer))
    for (const auto& prefix : prefixes)
      QEVAL_CHECK(name.compare(0, p.size() + prefix.size(), p + prefix) != 0,
                  "{}: tensor {} is present but layer {} {}", source, name, layer, why);
}

}  // namespace

void validate_block_weights(const BlockWeights& b, const ModelConfig& c, std::int64_t layer, const std::string& source) {
  const std::string p = fmt::format("layers.{}.", layer);
  const MixerKind mixer = c.mixer(layer);
  const FfnKind ffn = c.ffn(layer);
  expect_norm(b.attn_norm, c, p + "attn_norm", source);
  if (mixer == MixerKind::attention) {
    validate_attention(b, c, p, source);
    expect_none_of(b, layer, {"mamba."}, "is an attention layer", source);
  } else {
    validate_ssm(b.ssm, c, mixer, p, source);
    expect_none_of(b, layer, {"attn."}, fmt::format("has a {} mixer", to_string(mixer)), source);
  }
  for (auto [n, name] : {std::pair{&b.post_attn_norm, "post_attn_norm"}, std::pair{&b.post_mlp_norm, "post_mlp_norm"}}) {
    if (c.sandwich_norms)
      expect_norm(*n, c, p + name, source);
    else
      expect_absent(n->weight, p + name + ".weight", source);
  }
  switch (ffn) {
    case FfnKind::dense:
      expect_norm(b.mlp_norm, c, p + "mlp_norm", source);
      validate_dense_mlp(b, c, p, source);
      expect_none_of(b, layer, {"moe."}, "has a dense MLP", source);
      break;
    case FfnKind::moe:
      expect_norm(b.mlp_norm, c, p + "mlp_norm", source);
      validate_moe(b.moe, c, p, source);
      expect_none_of(b, layer, {"mlp."}, "has a mixture-of-experts feed-forward", source);
      break;
    case FfnKind::none:
      expect_none_of(b, layer, {"mlp", "moe."}, "has no feed-forward", source);
      break;
  }
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

std::vector<std::pair<std::string, at::Tensor*>> block_tensor_slots(BlockWeights& b, std::int64_t layer) {
  const std::string p = fmt::format("layers.{}.", layer);
  std::vector<std::pair<std::string, at::Tensor*>> out;
  auto norm = [&](const std::string& name, NormWeights& n) {
    out.emplace_back(p + name + ".weight", &n.weight);
    out.emplace_back(p + name + ".bias", &n.bias);
  };
  auto linear = [&](const std::string& name, LinearWeights& l) {
    out.emplace_back(p + name + ".weight", &l.weight);
    out.emplace_back(p + name + ".bias", &l.bias);
  };
  norm("attn_norm", b.attn_norm);
  linear("attn.qkv", b.qkv);
  linear("attn.q", b.q);
  linear("attn.k", b.k);
  linear("attn.v", b.v);
  linear("attn.o", b.o);
  norm("attn.q_norm", b.q_norm);
  norm("attn.k_norm", b.k_norm);
  SsmWeights& s = b.ssm;
  linear("mamba.in_proj", s.in_proj);
  out.emplace_back(p + "mamba.conv.weight", &s.conv_weight);
  out.emplace_back(p + "mamba.conv.bias", &s.conv_bias);
  linear("mamba.x_proj", s.x_proj);
  norm("mamba.dt_norm", s.dt_norm);
  norm("mamba.b_norm", s.b_norm);
  norm("mamba.c_norm", s.c_norm);
  linear("mamba.dt_proj", s.dt_proj);
  out.emplace_back(p + "mamba.dt_bias", &s.dt_bias);
  out.emplace_back(p + "mamba.A", &s.A);
  out.emplace_back(p + "mamba.D", &s.D);
  norm("mamba.norm", s.norm);
  linear("mamba.out_proj", s.out_proj);
  norm("post_attn_norm", b.post_attn_norm);
  norm("mlp_norm", b.mlp_norm);
  linear("mlp.up", b.up);
  linear("mlp.gate", b.gate);
  linear("mlp.gate_up", b.gate_up);
  norm("post_mlp_norm", b.post_mlp_norm);
  linear("mlp.down", b.down);
  out.emplace_back(p + "mlp.down_input_rotation", &b.down_input_rotation);
  MoeWeights& m = b.moe;
  out.emplace_back(p + "moe.router.weight", &m.router);
  auto expert = [&](const std::string& name, MoeWeights::Expert& e) {
    linear(name + ".gate", e.gate);
    linear(name + ".up", e.up);
    linear(name + ".down", e.down);
  };
  for (std::size_t e = 0; e < m.experts.size(); ++e) expert(fmt::format("moe.experts.{}", e), m.experts[e]);
  expert("moe.shared", m.shared);
  out.emplace_back(p + "moe.shared_gate.weight", &m.shared_gate);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> named_tensors(const BlockWeights& b, std::int64_t layer) {
  std::vector<std::pair<std::string, at::Tensor>> defined;
  for (auto& [name, t] : block_tensor_slots(const_cast<BlockWeights&>(b), layer))  // read only
    if (t->defined()) defined.emplace_back(name, *t);
  return defined;
}

namespace {

// max |x| of a contiguous float32 CPU tensor, in one threaded pass at memory speed; NaN or
// infinite when a value is, so the tensor is finite exactly when its maximum is. Every weight of
// every layer is checked as it is read (32 GB of float32 for an 8B model), where
// isfinite().logical_not().any() made two byte temporaries and three passes: 15 of the 18 seconds
// of the read phase on a 2-core Zen 4.
float max_abs_float32(const at::Tensor& t) { return kernels::cpu::parallel_absmax(t.data_ptr<float>(), t.numel()); }

bool is_float32_on_cpu(const at::Tensor& t) {
  return t.defined() && !t.is_meta() && t.is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

}  // namespace

std::optional<NonFiniteElement> first_non_finite(const at::Tensor& t) {
  if (!t.defined() || t.is_meta() || !at::isFloatingType(t.scalar_type())) return std::nullopt;
  if (is_float32_on_cpu(t) && std::isfinite(max_abs_float32(t))) return std::nullopt;
  const at::Tensor bad = t.isfinite().logical_not();
  if (!bad.any().item<bool>()) return std::nullopt;
  std::int64_t flat = bad.reshape({-1}).nonzero().select(1, 0)[0].item<std::int64_t>();
  NonFiniteElement found;
  found.value = t.reshape({-1})[flat].item<double>();
  found.index.resize(static_cast<std::size_t>(t.dim()));
  for (std::int64_t d = t.dim() - 1; d >= 0; --d) {
    found.index[static_cast<std::size_t>(d)] = flat % t.size(d);
    flat /= t.size(d);
  }
  return found;
}

namespace {

[[noreturn]] void fail_non_finite(const at::Tensor& t, const std::string& name, const std::string& source) {
  const auto bad = first_non_finite(t);
  QEVAL_CHECK(bad.has_value(), "{}: tensor {}: its maximum is not finite, yet no element is", source, name);
  fail("{}: tensor {} holds a non-finite value: {} at index [{}]; a model with NaN or infinite weights yields no "
       "number",
       source, name, bad->value, fmt::join(bad->index, ", "));
}

}  // namespace

void check_finite(const at::Tensor& t, const std::string& name, const std::string& source) {
  (void)checked_max_abs(t, name, source);
}

std::optional<float> checked_max_abs(const at::Tensor& t, const std::string& name, const std::string& source) {
  if (is_float32_on_cpu(t)) {
    const float m = max_abs_float32(t);
    if (!std::isfinite(m)) fail_non_finite(t, name, source);
    return m;
  }
  if (first_non_finite(t)) fail_non_finite(t, name, source);
  return std::nullopt;
}

std::map<std::string, float> checked_block_max_abs(const BlockWeights& block, std::int64_t layer,
                                                   const std::string& source) {
  std::map<std::string, float> max_abs;
  for (const auto& [name, tensor] : named_tensors(block, layer))
    if (const std::optional<float> m = checked_max_abs(tensor, name, source)) max_abs.emplace(name, *m);
  return max_abs;
}

}  // namespace qeval
