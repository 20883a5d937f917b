#include "model/init.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "common/error.h"

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
  auto uniform = [&](std::vector<std::int64_t> shape, double bound) {
    return at::empty(shape, at::TensorOptions().dtype(at::kFloat)).uniform_(-bound, bound, gen);
  };
  // The time-step bias: softplus⁻¹(Δ) for Δ log-uniform in [0.001, 0.1], floored at 1e-4, so the
  // initial Δ spans the range of time scales (Mamba's dt_min / dt_max / dt_init_floor).
  auto time_step_bias = [&](std::int64_t n) {
    const double lo = std::log(0.001), hi = std::log(0.1);
    at::Tensor dt = at::exp(at::rand({n}, gen, at::TensorOptions().dtype(at::kDouble)) * (hi - lo) + lo).clamp_min(1e-4);
    return (dt + at::log(-at::expm1(-dt))).to(at::kFloat);  // softplus⁻¹(Δ) = Δ + log(1 − e^−Δ)
  };
  // nn.Conv1d's default (kaiming-uniform with a = √5, and its bias): U(±1/√fan_in), fan_in = d_conv
  // for a depthwise convolution.
  auto conv = [&](SsmWeights& s, std::int64_t channels) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(c.ssm_d_conv));
    s.conv_weight = uniform({channels, c.ssm_d_conv}, bound);
    if (c.ssm_conv_bias) s.conv_bias = uniform({channels}, bound);
  };
  auto mamba = [&](SsmWeights& s) {
    const std::int64_t E = c.ssm_d_inner, N = c.ssm_d_state, R = c.ssm_dt_rank;
    s.in_proj = linear(2 * E, D, c.ssm_proj_bias, std);
    conv(s, E);
    s.x_proj = linear(R + 2 * N, E, false, std);
    s.dt_proj.weight = uniform({E, R}, 1.0 / std::sqrt(static_cast<double>(R)));
    s.dt_proj.bias = time_step_bias(E);
    // S4D-real: A[e, n] = −(n + 1) for every channel.
    s.A = -at::arange(1, N + 1, at::TensorOptions().dtype(at::kFloat)).unsqueeze(0).repeat({E, 1});
    s.D = at::ones({E});
    if (c.ssm_bcdt_norm) s.dt_norm.weight = at::ones({R}), s.b_norm.weight = at::ones({N}), s.c_norm.weight = at::ones({N});
    s.out_proj = linear(D, E, c.ssm_proj_bias, residual_std);
  };
  auto mamba2 = [&](SsmWeights& s) {
    const std::int64_t E = c.ssm_d_inner, H = c.ssm_heads, convolved = c.ssm_conv_dim(MixerKind::mamba2);
    s.in_proj = linear(E + convolved + H, D, c.ssm_proj_bias, std);
    conv(s, convolved);
    s.dt_bias = time_step_bias(H);
    s.A = -at::arange(1, H + 1, at::TensorOptions().dtype(at::kFloat));  // −1 … −H, as HF's Mamba-2
    s.D = at::ones({H});
    s.norm.weight = at::ones({E});
    s.out_proj = linear(D, E, c.ssm_proj_bias, residual_std);
  };
  ModelWeights w;
  w.token_embedding = normal({c.vocab_size, D}, std);
  if (c.position == PositionKind::learned) w.position_embedding = normal({c.max_seq_len, D}, std / 2);
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    BlockWeights b;
    b.attn_norm = norm();
    const MixerKind mixer = c.mixer(i);
    const FfnKind ffn = c.ffn(i);
    QEVAL_CHECK(ffn != FfnKind::moe, "init_weights: layer {} has a mixture-of-experts feed-forward; fresh weights are "
                "made for dense and no feed-forward only", i);
    if (mixer == MixerKind::mamba) {
      mamba(b.ssm);
    } else if (mixer == MixerKind::mamba2) {
      mamba2(b.ssm);
    } else if (c.fused_qkv) {
      b.qkv = linear((c.n_heads + 2 * c.n_kv_heads) * hd, D, c.has_qkv_bias(), std);
    } else {
      b.q = linear(c.n_heads * hd, D, c.has_qkv_bias(), std);
      b.k = linear(c.n_kv_heads * hd, D, c.has_qkv_bias(), std);
      b.v = linear(c.n_kv_heads * hd, D, c.has_qkv_bias(), std);
    }
    if (mixer == MixerKind::attention) {
      b.o = linear(D, c.n_heads * hd, c.attention_bias, residual_std);
      if (c.qk_norm) b.q_norm.weight = at::ones({hd}), b.k_norm.weight = at::ones({hd});
    }
    if (c.sandwich_norms) b.post_attn_norm = norm(), b.post_mlp_norm = norm();
    if (ffn == FfnKind::none) {
      w.blocks.push_back(std::move(b));
      continue;
    }
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
