// Block::attention: causal self-attention (softmax or softmax-1), grouped-query, rotary or not,
// sliding windows, q/k norms and soft caps as ModelConfig says (DESIGN.md §3). On the CPU the
// blocked or fused kernels of model/causal_attention_cpu.h skip what the causal mask hides; on a
// GPU LibTorch's fused attention runs when no observer asks for the probabilities, and qeval's fused
// attention with statistics (kernels/attention_statistics.h) when the observer takes per-head sums.
#include <torch/version.h>

#include "common/error.h"
#include "kernels/attention_statistics.h"
#include "kernels/cpu/fused_attention_cpu.h"
#include "kernels/fp32_gemm.h"
#include "model/block.h"
#include "model/causal_attention_cpu.h"
#include "model/norms.h"
#include "model/transformer.h"

namespace qeval {
namespace {

// c·tanh(x / c): Gemma-2's soft cap of attention scores.
at::Tensor soft_cap(const at::Tensor& x, double cap) { return at::tanh(x / cap) * cap; }

// x [B, H, L, hd] rotated by the table's angles, pairs as the config says.
at::Tensor apply_rope(const at::Tensor& x, const ForwardContext::RopeTable& table, const ModelConfig& config) {
  const std::int64_t L = x.size(2), rd = config.rotary_dims(), half = rd / 2;
  if (rd < x.size(3))  // partial rotary (NeoX): the first rd channels of each head rotate, the rest pass
    return at::cat({apply_rope(x.narrow(-1, 0, rd), table, config), x.narrow(-1, rd, x.size(3) - rd)}, -1);
  const at::Tensor &cos = table.cos, &sin = table.sin;
  at::Tensor a, b;  // the two members of each rotated pair, [B, H, L, rd/2]
  if (config.rope_pairing == RopePairing::interleaved) {
    at::Tensor pairs = x.reshape({x.size(0), x.size(1), L, half, 2});
    a = pairs.select(-1, 0);
    b = pairs.select(-1, 1);
    return at::stack({a * cos - b * sin, a * sin + b * cos}, -1).reshape(x.sizes());
  }
  a = x.narrow(-1, 0, half);
  b = x.narrow(-1, half, half);
  return at::cat({a * cos - b * sin, a * sin + b * cos}, -1);
}

// LibTorch's fused causal attention (scaled_dot_product_attention) runs here: LibTorch ≥ 2.1 on a GPU.
bool fused_attention_available(const at::Tensor& q) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)  // the scale argument
  return q.is_cuda();
#else
  return false;
#endif
}

// q, k, v [B, H, L, hd] (k, v already repeated for grouped-query), scores scaled by `scale` → [B, L, H·hd].
at::Tensor fused_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale) {
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

}  // namespace

at::Tensor Block::attention(const at::Tensor& h, const ForwardContext& context, ForwardObserver* observer) const {
  const ModelConfig& c = *config_;
  const BlockWeights& bw = weights_;
  const std::int64_t B = h.size(0), L = h.size(1), H = c.n_heads, Hkv = c.n_kv_heads;
  const std::int64_t hd = c.head_dim();
  at::Tensor q, k, v;
  if (slots_.qkv >= 0) {
    at::Tensor qkv = linear(slots_.qkv).forward(h);  // [B, L, (H + 2 Hkv) hd]
    auto parts = qkv.split_with_sizes({H * hd, Hkv * hd, Hkv * hd}, -1);
    q = parts[0], k = parts[1], v = parts[2];
  } else {
    q = linear(slots_.q).forward(h);
    k = linear(slots_.k).forward(h);
    v = linear(slots_.v).forward(h);
  }
  q = q.reshape({B, L, H, hd}).transpose(1, 2);  // [B, H, L, hd]
  k = k.reshape({B, L, Hkv, hd}).transpose(1, 2);
  v = v.reshape({B, L, Hkv, hd}).transpose(1, 2);
  if (c.qk_norm) {  // per head, before rotary (Qwen3, Gemma-3)
    q = rms_norm(q, bw.q_norm.weight, c.norm_eps);
    k = rms_norm(k, bw.k_norm.weight, c.norm_eps);
  }
  if (c.position == PositionKind::rope) {
    const ForwardContext::RopeTable& table = context.rope_for(c.rope_base(layer_));
    q = apply_rope(q, table, c);
    k = apply_rope(k, table, c);
  }
  // A scheme's quantised cache: K as stored (after k-norm and rotary) and V, before any path reads them.
  if (kv_cache_) kv_cache_->apply(layer_, k, v);
  bool wants_probs = observer && observer->wants_attention(layer_);
  const std::int64_t window = c.attention_window(layer_);
  const double scale = c.attention_scale_or_default();
  // Soft cap, mask and softmax of scaled scores [.., L, L] or of one block of them.
  auto probabilities = [&](at::Tensor scores, const at::Tensor& mask) {
    if (c.attn_logit_softcap > 0) scores = soft_cap(scores, c.attn_logit_softcap);
    scores.add_(mask);
    // Half precision: the softmax in fp32, as Hugging Face's eager attention does.
    if (scores.scalar_type() != at::kFloat && scores.scalar_type() != at::kDouble) scores = scores.to(at::kFloat);
    return c.attention_softmax == SoftmaxKind::softmax1 ? softmax1(scores) : at::softmax(scores, -1);
  };
  if (blocked_causal_attention_applies(q)) {  // CPU inference: skips what the causal mask hides
    at::Tensor probs;
    const auto variant = fused_attention_variant(q, k, v, c.attn_logit_softcap);
    at::Tensor out =
        variant != kernels::cpu::FusedAttentionIsa::none
            ? kernels::cpu::fused_causal_attention(q, k, v, window, scale, c.attention_softmax == SoftmaxKind::softmax1,
                                                   wants_probs ? &probs : nullptr, variant)
            : blocked_causal_attention(q, k, v, context.mask_for(window), window, scale, probabilities,
                                       wants_probs ? &probs : nullptr);
    if (wants_probs) observer->on_attention(layer_, probs);
    return linear(slots_.o).forward(out);
  }
  // GPU with statistics: the fused kernel (kernels/attention_statistics.h) measures the weights in one
  // pass over q and k (by kv head, no repeat) and hands the observer [B, H, 4] sums; the probabilities
  // are not materialised for it. The output comes from the path below exactly as without statistics,
  // so statistics change no bit of the forward.
  AttentionSumsRequest request;
  if (observer && q.is_cuda() && observer->wants_attention_sums(layer_, &request) &&
      kernels::fused_attention_stats_unsupported(q, k, v).empty()) {
    AttentionSums sums;
    kernels::fused_attention_stats(q, k, v, window, scale, c.attn_logit_softcap, c.attention_softmax == SoftmaxKind::softmax1,
                                   request.sink_T, request.window, &sums.sums, /*with_output=*/false);
    sums.length = L, sums.window = request.window, sums.sink_T = request.sink_T;
    observer->on_attention_sums(layer_, sums);
    wants_probs = false;
  }
  if (Hkv != H) {  // grouped-query: query head i reads kv head i / (H / Hkv)
    k = k.repeat_interleave(H / Hkv, 1);
    v = v.repeat_interleave(H / Hkv, 1);
  }
  at::Tensor out;  // [B, L, H·hd]
  if (!wants_probs && c.attention_softmax == SoftmaxKind::softmax && window == 0 && c.attn_logit_softcap <= 0 &&
      fused_attention_available(q)) {
    out = fused_causal_attention(q, k, v, scale);
  } else {
    // Scores scaled inside the GEMM (kernels/fp32_gemm.h: oneDNN where it runs), then the mask of
    // this layer's window (plain causal for global layers).
    at::Tensor scores = kernels::fp32_bmm(q.reshape({B * H, L, hd}), k.reshape({B * H, L, hd}).transpose(1, 2), scale);
    // In half precision the probabilities are fp32; they are rounded to the compute dtype for the
    // product with v.
    at::Tensor probs = probabilities(scores.view({B, H, L, L}), context.mask_for(window));
    if (wants_probs) observer->on_attention(layer_, probs);
    out = kernels::fp32_bmm(probs.to(v.scalar_type()).reshape({B * H, L, L}), v.reshape({B * H, L, hd}))
              .view({B, H, L, hd})
              .transpose(1, 2)
              .reshape({B, L, H * hd});
  }
  return linear(slots_.o).forward(out);
}

}  // namespace qeval
