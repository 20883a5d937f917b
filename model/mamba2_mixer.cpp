// Block::mamba2: the Mamba-2 (SSD) mixer of Mamba2ForCausalLM (DESIGN.md §3), as HF's
// Mamba2Mixer.torch_forward computes it:
//   z, xBC, Δ = in_proj(h);  xBC = silu(causal depthwise conv(xBC));  x, B, C = xBC
//   Δ = clamp(softplus(Δ + dt_bias), dt_min, dt_max);  y = SSD(x, Δ, A, B, C) + D x   (per head)
//   out_proj(gated RMSNorm(y, z)),  gated RMSNorm(y, z) = RMSNorm(y · silu(z)) · w
// The gated norm normalises over the whole d_inner (HF) or over each of ssm_norm_groups groups
// (mamba_ssm, llama.cpp). in_proj and out_proj are Linears; conv, dt_bias, A, D and the norm stay
// full precision. An observer may ask for what the scan selects with (model/observer.h SsmSelection).
#include "model/block.h"
#include "model/norms.h"
#include "model/ssm_scan.h"

namespace qeval {

at::Tensor Block::mamba2(const at::Tensor& h, ForwardObserver* observer) const {
  const ModelConfig& c = *config_;
  const SsmWeights& w = weights_.ssm;
  const std::int64_t Bn = h.size(0), L = h.size(1), E = c.ssm_d_inner, N = c.ssm_d_state, H = c.ssm_heads,
                     G = c.ssm_groups, P = c.ssm_head_dim(), conv = c.ssm_conv_dim(MixerKind::mamba2);
  at::Tensor zxbcdt = linear(slots_.in_proj).forward(h);  // [B, L, E + conv + H]
  at::Tensor z = zxbcdt.narrow(-1, 0, E);
  at::Tensor xbc = at::silu(causal_depthwise_conv1d(zxbcdt.narrow(-1, E, conv), w.conv_weight, w.conv_bias));
  at::Tensor dt = at::softplus(zxbcdt.narrow(-1, E + conv, H) + w.dt_bias);  // [B, L, H]
  if (c.ssm_dt_max > 0 || c.ssm_dt_min > 0)
    dt = c.ssm_dt_max > 0 ? dt.clamp(c.ssm_dt_min, c.ssm_dt_max) : dt.clamp_min(c.ssm_dt_min);
  // The SSD in float32 at least (half precision on a GPU), as HF's torch_forward.
  const at::ScalarType st = h.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  dt = dt.to(st);
  at::Tensor x = xbc.narrow(-1, 0, E).reshape({Bn, L, H, P}).to(st);
  at::Tensor Bm = xbc.narrow(-1, E, G * N).reshape({Bn, L, G, N}).to(st);
  at::Tensor Cm = xbc.narrow(-1, E + G * N, G * N).reshape({Bn, L, G, N}).to(st);
  const at::Tensor A = w.A.to(st);
  if (observer && observer->wants_ssm_selection(layer_))
    observer->on_ssm_selection(layer_, {SsmSelection::Kind::mamba2, dt, A, Bm, Cm});
  at::Tensor y = ssd_chunked(x, dt, A, Bm, Cm, w.D.to(st), c.ssm_chunk).reshape({Bn, L, E}).to(h.scalar_type());
  // In float32 whatever the compute dtype, as HF's MambaRMSNormGated.
  at::Tensor g = (y.to(at::kFloat) * at::silu(z.to(at::kFloat))).reshape({Bn, L, c.ssm_norm_groups, E / c.ssm_norm_groups});
  g = g * at::rsqrt(g.pow(2).mean(-1, /*keepdim=*/true) + c.norm_eps);
  at::Tensor normed = g.reshape({Bn, L, E}).to(y.scalar_type()) * w.norm.weight;
  return linear(slots_.out_proj).forward(normed);
}

}  // namespace qeval
