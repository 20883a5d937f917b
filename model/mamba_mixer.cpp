// Block::mamba: the Mamba (S6) mixer of MambaForCausalLM and Jamba's Mamba layers (DESIGN.md §3),
// as HF's MambaMixer.slow_forward computes it:
//   x, z = in_proj(h);  x = silu(causal depthwise conv(x));  Δ, B, C = x_proj(x)
//   (Jamba: RMSNorm of Δ, B and C);  Δ = softplus(dt_proj(Δ));  y = scan(x, Δ, A, B, C) + D x
//   out_proj(y · silu(z))
// in_proj, x_proj, dt_proj and out_proj are Linears (quantisable; x_proj and dt_proj only when a
// scheme asks, quant/schemes/spec.h); the convolution, A, D and the norms stay full precision. An observer
// may ask for what the scan selects with (model/observer.h SsmSelection).
#include "model/block.h"
#include "model/norms.h"
#include "model/ssm_scan.h"

namespace qeval {

at::Tensor Block::mamba(const at::Tensor& h, ForwardObserver* observer) const {
  const ModelConfig& c = *config_;
  const SsmWeights& w = weights_.ssm;
  const std::int64_t E = c.ssm_d_inner, N = c.ssm_d_state, R = c.ssm_dt_rank;
  at::Tensor xz = linear(slots_.in_proj).forward(h);  // [B, L, 2E]
  at::Tensor x = at::silu(causal_depthwise_conv1d(xz.narrow(-1, 0, E), w.conv_weight, w.conv_bias));
  at::Tensor z = xz.narrow(-1, E, E);
  at::Tensor params = linear(slots_.x_proj).forward(x);  // [B, L, R + 2N]
  at::Tensor dt = params.narrow(-1, 0, R), Bm = params.narrow(-1, R, N), Cm = params.narrow(-1, R + N, N);
  if (c.ssm_bcdt_norm) {
    dt = rms_norm(dt, w.dt_norm.weight, c.norm_eps);
    Bm = rms_norm(Bm, w.b_norm.weight, c.norm_eps);
    Cm = rms_norm(Cm, w.c_norm.weight, c.norm_eps);
  }
  at::Tensor delta = at::softplus(linear(slots_.dt_proj).forward(dt));  // [B, L, E]
  // The scan in float32 at least (half precision on a GPU), as HF discretises in float32.
  const at::ScalarType scan_type = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto f = [&](const at::Tensor& t) { return t.to(scan_type); };
  const at::Tensor delta_s = f(delta), A = f(w.A), Bs = f(Bm), Cs = f(Cm);
  if (observer && observer->wants_ssm_selection(layer_))
    observer->on_ssm_selection(layer_, {SsmSelection::Kind::mamba, delta_s, A, Bs, Cs});
  at::Tensor y = selective_scan(f(x), delta_s, A, Bs, Cs, f(w.D)).to(x.scalar_type());
  return linear(slots_.out_proj).forward(y * at::silu(z));
}

}  // namespace qeval
