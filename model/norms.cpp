#include "model/norms.h"

namespace qeval {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kDouble) {
    at::Tensor xf = x.to(at::kFloat);
    at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return normed.to(x.scalar_type()) * w;
  }
  at::Tensor inv_rms = at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return x * inv_rms * w;
}

at::Tensor apply_norm(const at::Tensor& x, const NormWeights& w, const ModelConfig& config) {
  if (config.norm == NormKind::layernorm) return at::layer_norm(x, {config.d_model}, w.weight, w.bias, config.norm_eps);
  // rmsnorm (per-channel gain [D]) and rmsnorm_single (one gain [1]) differ only in broadcast.
  return rms_norm(x, w.weight, config.norm_eps);
}

}  // namespace qeval
