#include "quant/formats/integer.h"

#include "common/error.h"

namespace qeval {

at::Tensor divisor(float value, const at::Tensor& like) { return at::scalar_tensor(value, like.options()); }

namespace {

// float32 is the product's arithmetic; float64 is `--dtype fp64`'s, the rounding-free reference.
void check_float_or_double(const at::Tensor& x, const char* what) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble, what, ": expected float32 or float64, got ",
              x.scalar_type());
}

}  // namespace

at::Tensor int8_absmax_scale(const at::Tensor& x, at::IntArrayRef reduce_dims) {
  check_float_or_double(x, "int8_absmax_scale");
  at::Tensor amax = x.abs().amax(reduce_dims, /*keepdim=*/true);
  return at::where(amax == 0, at::ones_like(amax), amax / divisor(127.0f, amax));
}

at::Tensor int8_quantize(const at::Tensor& x, const at::Tensor& scale) {
  return at::round(x / scale).clamp_(-127, 127).to(at::kChar);
}

at::Tensor int8_dequantize(const at::Tensor& q, const at::Tensor& scale) { return q.to(scale.scalar_type()) * scale; }

ZeroPointParams zeropoint4_params(const at::Tensor& x, at::IntArrayRef reduce_dims) {
  check_float_or_double(x, "zeropoint4_params");
  at::Tensor mn = x.amin(reduce_dims, /*keepdim=*/true), mx = x.amax(reduce_dims, /*keepdim=*/true);
  at::Tensor constant = mx == mn;
  at::Tensor s = (mx - mn) / divisor(15.0f, mn);
  // Constant groups: s = |c| (1 for c = 0), z = 1 for c < 0 else 0, so x̂ = c exactly.
  at::Tensor c_scale = at::where(mn == 0, at::ones_like(mn), mn.abs());
  s = at::where(constant, c_scale, s);
  at::Tensor z = at::where(constant, (mn < 0).to(mn.scalar_type()), at::round(-mn / s));
  return {s, z + 0.0f};  // + 0 turns a −0 zero point (from min = 0) into +0
}

at::Tensor zeropoint4_quantize(const at::Tensor& x, const ZeroPointParams& p) {
  return (at::round(x / p.scale) + p.zero).clamp_(0, 15).to(at::kByte);
}

at::Tensor zeropoint4_dequantize(const at::Tensor& q, const ZeroPointParams& p) {
  return (q.to(p.scale.scalar_type()) - p.zero) * p.scale;
}

}  // namespace qeval
