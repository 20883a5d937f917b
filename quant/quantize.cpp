#include "quant/quantize.h"

#include "common/error.h"
#include "quant/float_quantize.h"

namespace qeval {

at::Tensor fake_quantize_activations(const at::Tensor& x, const QuantSpec& spec) {
  if (!spec.enabled()) return x;
  TORCH_CHECK(x.dim() == 3, "fake_quantize_activations: expected [B, L, K], got ", x.dim(), " dims");
  QEVAL_CHECK(!spec.is_static(), "fake_quantize_activations: a static (calibrated) scale is the layer's, not the spec's");
  if (spec.is_float_format()) return fake_quantize_float_activations(x, spec);
  std::vector<std::int64_t> dims;
  switch (spec.granularity) {
    case Granularity::tensor: dims = {1, 2}; break;   // one scale per sequence
    case Granularity::token: dims = {2}; break;       // one per position
    case Granularity::feature: dims = {1}; break;     // one per channel of each sequence
    default: fail("fake_quantize_activations: granularity {} does not apply to activations", spec.granularity_name());
  }
  if (spec.kind == QuantKind::int8_absmax) {
    at::Tensor s = int8_absmax_scale(x, dims);
    return int8_dequantize(int8_quantize(x, s), s);
  }
  ZeroPointParams p = zeropoint4_params(x, dims);
  return zeropoint4_dequantize(zeropoint4_quantize(x, p), p);
}

}  // namespace qeval
