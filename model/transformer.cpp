#include "model/transformer.h"

#include <ATen/core/grad_mode.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "kernels/cpu/fused_attention_cpu.h"
#include "kernels/fp32_gemm.h"
#include "model/causal_attention_cpu.h"

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
    : config_(std::move(config)), weights_(std::move(weights)) {
  config_.validate(source);
  validate_weights(weights_, config_, source);
  auto add = [&](const std::string& name, const LinearWeights& w) {
    linears_.push_back({name, std::make_shared<FloatLinear>(w.weight, w.bias)});
    return static_cast<int>(linears_.size() - 1);
  };
  for (std::int64_t i = 0; i < config_.n_layers; ++i) {
    const auto& b = weights_.blocks[static_cast<std::size_t>(i)];
    const std::string p = "layers." + std::to_string(i) + ".";
    BlockLinears idx;
    if (config_.fused_qkv) {
      idx.qkv = add(p + "attn.qkv", b.qkv);
    } else {
      idx.q = add(p + "attn.q", b.q);
      idx.k = add(p + "attn.k", b.k);
      idx.v = add(p + "attn.v", b.v);
    }
    idx.o = add(p + "attn.o", b.o);
    if (config_.fused_gate_up) {
      idx.gate_up = add(p + "mlp.gate_up", b.gate_up);
    } else {
      if (config_.gated_mlp()) idx.gate = add(p + "mlp.gate", b.gate);
      idx.up = add(p + "mlp.up", b.up);
    }
    idx.down = add(p + "mlp.down", b.down);
    blocks_.push_back(idx);
  }
  lm_head_ = add("lm_head", LinearWeights{weights_.lm_head, weights_.lm_head_bias});
}

Transformer Transformer::placed(PlacementCache& cache) const {
  Transformer out = *this;
  auto norm = [&](NormWeights& w) {
    w.weight = cache.move(w.weight);
    w.bias = cache.move(w.bias);
  };
  ModelWeights& w = out.weights_;
  w.token_embedding = cache.move(w.token_embedding);
  w.position_embedding = cache.move(w.position_embedding);
  norm(w.final_norm);
  for (auto& b : w.blocks) {
    for (NormWeights* n : {&b.attn_norm, &b.q_norm, &b.k_norm, &b.post_attn_norm, &b.mlp_norm, &b.post_mlp_norm}) norm(*n);
    b.down_input_rotation = cache.move(b.down_input_rotation);
  }
  for (auto& named : out.linears_) named.linear = named.linear->placed(cache);
  return out;
}

void Transformer::replace_linear(const std::string& name, std::shared_ptr<const Linear> replacement) {
  QEVAL_CHECK(replacement != nullptr, "replace_linear: null replacement for {}", name);
  std::string valid;
  for (auto& named : linears_) {
    if (named.name == name) {
      QEVAL_CHECK(replacement->in_features() == named.linear->in_features() &&
                      replacement->out_features() == named.linear->out_features(),
                  "replace_linear: {} is [{} -> {}], replacement is [{} -> {}]", name, named.linear->in_features(),
                  named.linear->out_features(), replacement->in_features(), replacement->out_features());
      named.linear = std::move(replacement);
      return;
    }
    valid += (valid.empty() ? "" : ", ") + named.name;
  }
  fail("replace_linear: no linear named '{}'; the model has {}", name, valid);
}

std::int64_t Transformer::linear_weight_bytes() const {
  std::int64_t total = 0;
  for (const auto& named : linears_) total += named.linear->weight_bytes();
  return total;
}

namespace {

// x += y, in place when no gradient is recorded: x is the pass's own residual stream (index_select
// made it), and observers reduce what they are handed during the call and keep no reference.
void residual_add(at::Tensor& x, const at::Tensor& y) {
  const bool in_place = !at::GradMode::is_enabled() || (!x.requires_grad() && !y.requires_grad());
  x = in_place ? x.add_(y) : x + y;
}

// c·tanh(x / c): Gemma-2's soft cap of attention scores and logits.
at::Tensor soft_cap(const at::Tensor& x, double cap) { return at::tanh(x / cap) * cap; }

}  // namespace

at::Tensor Transformer::rms_norm(const at::Tensor& x, const at::Tensor& w) const {
  if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kDouble) {
    // Half precision (GPU): the mean square in fp32, as Hugging Face's Llama does (x² overflows
    // fp16 beyond |x| = 256), normalised in fp32, rounded to the compute dtype, then the gain.
    at::Tensor xf = x.to(at::kFloat);
    at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + config_.norm_eps);
    return normed.to(x.scalar_type()) * w;
  }
  at::Tensor inv_rms = at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + config_.norm_eps);
  return x * inv_rms * w;
}

at::Tensor Transformer::norm(const at::Tensor& x, const NormWeights& w) const {
  if (config_.norm == NormKind::layernorm)
    return at::layer_norm(x, {config_.d_model}, w.weight, w.bias, config_.norm_eps);
  // rmsnorm (per-channel gain [D]) and rmsnorm_single (one gain [1]) differ only in broadcast.
  return rms_norm(x, w.weight);
}

const Transformer::RopeTable& Transformer::PositionTables::rope_for(double theta) const {
  for (const auto& t : rope)
    if (t.theta == theta) return t;
  fail("Transformer: no rotary table for base {}", theta);
}

const at::Tensor& Transformer::PositionTables::mask_for(std::int64_t window) const {
  for (const auto& m : masks)
    if (m.window == window) return m.bias;
  fail("Transformer: no attention mask for window {}", window);
}

Transformer::PositionTables Transformer::position_tables(std::int64_t L, const at::Tensor& like) const {
  PositionTables t;
  for (std::int64_t layer = 0; layer < config_.n_layers; ++layer) {
    const double theta = config_.rope_base(layer);
    const std::int64_t window = config_.attention_window(layer);
    if (config_.position == PositionKind::rope &&
        std::none_of(t.rope.begin(), t.rope.end(), [&](const RopeTable& r) { return r.theta == theta; })) {
      const std::int64_t rd = config_.rotary_dims();
      // Angles in double on the input's device, then cos/sin rounded once to the compute dtype.
      auto opts = like.options().dtype(at::kDouble);
      at::Tensor inv_freq = at::pow(theta, -at::arange(0, rd, 2, opts) / static_cast<double>(rd));  // [rd/2]
      at::Tensor angles = at::outer(at::arange(L, opts), inv_freq);                                // [L, rd/2]
      t.rope.push_back({theta, angles.cos().to(like.scalar_type()), angles.sin().to(like.scalar_type())});
    }
    if (std::none_of(t.masks.begin(), t.masks.end(), [&](const MaskTable& m) { return m.window == window; })) {
      at::Tensor i = at::arange(L, like.options().dtype(at::kLong)).unsqueeze(1);  // query
      at::Tensor j = at::arange(L, like.options().dtype(at::kLong)).unsqueeze(0);  // key
      at::Tensor hidden = j > i;
      if (window > 0) hidden = hidden.logical_or(i - j >= window);
      t.masks.push_back(
          {window, at::zeros({L, L}, like.options()).masked_fill_(hidden, -std::numeric_limits<double>::infinity())});
    }
  }
  return t;
}

at::Tensor Transformer::apply_rope(const at::Tensor& x, const RopeTable& table) const {
  const std::int64_t L = x.size(2), rd = config_.rotary_dims(), half = rd / 2;
  if (rd < x.size(3))  // partial rotary (NeoX): the first rd channels of each head rotate, the rest pass
    return at::cat({apply_rope(x.narrow(-1, 0, rd), table), x.narrow(-1, rd, x.size(3) - rd)}, -1);
  const at::Tensor &cos = table.cos, &sin = table.sin;
  at::Tensor a, b;  // the two members of each rotated pair, [B, H, L, rd/2]
  if (config_.rope_pairing == RopePairing::interleaved) {
    at::Tensor pairs = x.reshape({x.size(0), x.size(1), L, half, 2});
    a = pairs.select(-1, 0);
    b = pairs.select(-1, 1);
    return at::stack({a * cos - b * sin, a * sin + b * cos}, -1).reshape(x.sizes());
  }
  a = x.narrow(-1, 0, half);
  b = x.narrow(-1, half, half);
  return at::cat({a * cos - b * sin, a * sin + b * cos}, -1);
}

bool Transformer::fused_attention_available(const at::Tensor& q) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)  // the scale argument
  return q.is_cuda();
#else
  return false;
#endif
}

at::Tensor Transformer::fused_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               double scale) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  // LibTorch's fused attention (flash or memory-efficient kernels on a GPU): what
  // Hugging Face's SDPA path runs. The probabilities never exist in memory, so it serves only
  // passes that observe no attention, with the plain softmax.
  const std::int64_t B = q.size(0), H = q.size(1), L = q.size(2), hd = q.size(3);
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, scale)
      .transpose(1, 2)
      .reshape({B, L, H * hd});
#else
  TORCH_CHECK(false, "fused attention needs LibTorch 2.1 or newer");
#endif
}

at::Tensor Transformer::attention(std::int64_t layer, const at::Tensor& h, const PositionTables& tables,
                                  ForwardObserver* observer) const {
  const auto& idx = blocks_[static_cast<std::size_t>(layer)];
  const auto& bw = weights_.blocks[static_cast<std::size_t>(layer)];
  const std::int64_t B = h.size(0), L = h.size(1), H = config_.n_heads, Hkv = config_.n_kv_heads;
  const std::int64_t hd = config_.head_dim();
  at::Tensor q, k, v;
  if (idx.qkv >= 0) {
    at::Tensor qkv = linear(idx.qkv).forward(h);  // [B, L, (H + 2 Hkv) hd]
    auto parts = qkv.split_with_sizes({H * hd, Hkv * hd, Hkv * hd}, -1);
    q = parts[0], k = parts[1], v = parts[2];
  } else {
    q = linear(idx.q).forward(h);
    k = linear(idx.k).forward(h);
    v = linear(idx.v).forward(h);
  }
  q = q.reshape({B, L, H, hd}).transpose(1, 2);  // [B, H, L, hd]
  k = k.reshape({B, L, Hkv, hd}).transpose(1, 2);
  v = v.reshape({B, L, Hkv, hd}).transpose(1, 2);
  if (config_.qk_norm) {  // per head, before rotary (Qwen3, Gemma-3)
    q = rms_norm(q, bw.q_norm.weight);
    k = rms_norm(k, bw.k_norm.weight);
  }
  if (config_.position == PositionKind::rope) {
    const RopeTable& table = tables.rope_for(config_.rope_base(layer));
    q = apply_rope(q, table);
    k = apply_rope(k, table);
  }
  const bool wants_probs = observer && observer->wants_attention(layer);
  const std::int64_t window = config_.attention_window(layer);
  const double scale = config_.attention_scale_or_default();
  // Soft cap, mask and softmax of scaled scores [.., L, L] or of one block of them.
  auto probabilities = [&](at::Tensor scores, const at::Tensor& mask) {
    if (config_.attn_logit_softcap > 0) scores = soft_cap(scores, config_.attn_logit_softcap);
    scores.add_(mask);
    // Half precision: the softmax in fp32, as Hugging Face's eager attention does.
    if (scores.scalar_type() != at::kFloat && scores.scalar_type() != at::kDouble) scores = scores.to(at::kFloat);
    return config_.attention_softmax == SoftmaxKind::softmax1 ? softmax1(scores) : at::softmax(scores, -1);
  };
  if (blocked_causal_attention_applies(q)) {  // CPU inference: skips what the causal mask hides
    at::Tensor probs;
    const auto variant = fused_attention_variant(q, k, v, config_.attn_logit_softcap);
    at::Tensor out =
        variant != kernels::cpu::FusedAttentionIsa::none
            ? kernels::cpu::fused_causal_attention(q, k, v, window, scale,
                                                   config_.attention_softmax == SoftmaxKind::softmax1,
                                                   wants_probs ? &probs : nullptr, variant)
            : blocked_causal_attention(q, k, v, tables.mask_for(window), window, scale, probabilities,
                                       wants_probs ? &probs : nullptr);
    if (wants_probs) observer->on_attention(layer, probs);
    return linear(idx.o).forward(out);
  }
  if (Hkv != H) {  // grouped-query: query head i reads kv head i / (H / Hkv)
    k = k.repeat_interleave(H / Hkv, 1);
    v = v.repeat_interleave(H / Hkv, 1);
  }
  at::Tensor out;  // [B, L, H·hd]
  if (!wants_probs && config_.attention_softmax == SoftmaxKind::softmax && window == 0 &&
      config_.attn_logit_softcap <= 0 && fused_attention_available(q)) {
    out = fused_causal_attention(q, k, v, scale);
  } else {
    // Scores scaled inside the GEMM (kernels/fp32_gemm.h: oneDNN where it runs), then the mask of
    // this layer's window (plain causal for global layers).
    at::Tensor scores =
        kernels::fp32_bmm(q.reshape({B * H, L, hd}), k.reshape({B * H, L, hd}).transpose(1, 2), scale);
    // In half precision the probabilities are fp32; they are rounded to the compute dtype for the
    // product with v.
    at::Tensor probs = probabilities(scores.view({B, H, L, L}), tables.mask_for(window));
    if (wants_probs) observer->on_attention(layer, probs);
    out = kernels::fp32_bmm(probs.to(v.scalar_type()).reshape({B * H, L, L}), v.reshape({B * H, L, hd}))
              .view({B, H, L, hd})
              .transpose(1, 2)
              .reshape({B, L, H * hd});
  }
  return linear(idx.o).forward(out);
}

at::Tensor Transformer::mlp(std::int64_t layer, const at::Tensor& h) const {
  const auto& idx = blocks_[static_cast<std::size_t>(layer)];
  at::Tensor gate, up;
  if (idx.gate_up >= 0) {  // one [2F] output: gate then up (Phi-3)
    at::Tensor gate_up = linear(idx.gate_up).forward(h);
    gate = gate_up.narrow(-1, 0, config_.d_ff);
    up = gate_up.narrow(-1, config_.d_ff, config_.d_ff);
  } else {
    if (idx.gate >= 0) gate = linear(idx.gate).forward(h);
    up = linear(idx.up).forward(h);
  }
  at::Tensor hidden;
  switch (config_.mlp) {
    case MlpKind::gelu: hidden = at::gelu(up, "tanh"); break;
    case MlpKind::gelu_erf: hidden = at::gelu(up); break;
    case MlpKind::relu: hidden = at::relu(up); break;
    case MlpKind::swiglu: hidden = at::silu(gate) * up; break;
    case MlpKind::geglu: hidden = at::gelu(gate, "tanh") * up; break;
  }
  const at::Tensor& rotation = weights_.blocks[static_cast<std::size_t>(layer)].down_input_rotation;
  if (rotation.defined()) hidden = at::matmul(hidden, rotation);
  return linear(idx.down).forward(hidden);
}

void Transformer::block(std::int64_t layer, at::Tensor& x, const PositionTables& tables, ForwardObserver* observer) const {
  const auto& b = weights_.blocks[static_cast<std::size_t>(layer)];
  if (config_.parallel_residual) {  // both branches read the block's input (NeoX)
    at::Tensor attn_out = attention(layer, norm(x, b.attn_norm), tables, observer);
    at::Tensor mlp_out = mlp(layer, norm(x, b.mlp_norm));
    residual_add(x, attn_out);
    residual_add(x, mlp_out);
  } else if (config_.sandwich_norms) {  // each branch's output normed before its residual add (Gemma-3)
    residual_add(x, norm(attention(layer, norm(x, b.attn_norm), tables, observer), b.post_attn_norm));
    residual_add(x, norm(mlp(layer, norm(x, b.mlp_norm)), b.post_mlp_norm));
  } else {
    residual_add(x, attention(layer, norm(x, b.attn_norm), tables, observer));
    residual_add(x, mlp(layer, norm(x, b.mlp_norm)));
  }
}

at::Tensor Transformer::forward(const at::Tensor& tokens, ForwardObserver* observer) const {
  TORCH_CHECK(tokens.dim() == 2, "Transformer::forward: tokens must be [B, L], got ", tokens.dim(), " dims");
  const std::int64_t L = tokens.size(1);
  if (config_.position == PositionKind::learned)
    QEVAL_CHECK(L <= config_.max_seq_len, "Transformer::forward: window of {} tokens exceeds the model's {} learned positions",
                L, config_.max_seq_len);
  if (tokens.numel() > 0) {
    std::int64_t lo = tokens.min().item<std::int64_t>(), hi = tokens.max().item<std::int64_t>();
    QEVAL_CHECK(lo >= 0 && hi < config_.vocab_size, "Transformer::forward: token id {} outside the vocabulary of {}",
                lo < 0 ? lo : hi, config_.vocab_size);
  }
  const at::Tensor ids = tokens.to(weights_.token_embedding.device()).reshape({-1});
  at::Tensor x = weights_.token_embedding.index_select(0, ids).reshape({tokens.size(0), L, -1});
  // The scale is rounded to the compute dtype first, as HF Gemma does (a 0-dim tensor of x's dtype).
  if (config_.embedding_scale != 1.0) x = x * at::scalar_tensor(config_.embedding_scale, x.options());
  if (config_.position == PositionKind::learned) x = x + weights_.position_embedding.narrow(0, 0, L);
  const PositionTables tables = position_tables(L, x);
  for (std::int64_t i = 0; i < config_.n_layers; ++i) {
    block(i, x, tables, observer);
    if (observer) observer->on_block_output(i, x);
  }
  at::Tensor logits = linear(lm_head_).forward(norm(x, weights_.final_norm));
  if (config_.final_logit_softcap > 0) logits = soft_cap(logits, config_.final_logit_softcap);
  return logits;
}

}  // namespace qeval
