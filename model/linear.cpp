#include "model/linear.h"

#include "common/error.h"
#include "kernels/fp32_gemm.h"
#include "model/placement.h"

namespace qeval {

std::shared_ptr<const Linear> Linear::placed(PlacementCache& cache) const {
  fail("{} cannot be placed on {} ({}): only float and quantised linears can", describe(),
       cache.placement().device.str(), dtype_name(cache.placement().dtype));
}

std::shared_ptr<const Linear> LinearDecorator::placed(PlacementCache& cache) const {
  return with_inner(inner_->placed(cache));
}

std::shared_ptr<const Linear> LinearDecorator::with_inner(std::shared_ptr<const Linear>) const {
  fail("a wrapped {} cannot be placed on another device: place the model before wrapping its linears", describe());
}

std::shared_ptr<const Linear> FloatLinear::placed(PlacementCache& cache) const {
  // Without the maximum: another dtype rounds the weight, and a device's quantisers take their own.
  return std::make_shared<FloatLinear>(cache.move(weight_), cache.move(bias_));
}

LinearDecorator::LinearDecorator(std::shared_ptr<const Linear> inner) : inner_(std::move(inner)) {
  QEVAL_CHECK(inner_ != nullptr, "LinearDecorator: null linear to wrap");
}

FloatLinear::FloatLinear(at::Tensor weight, at::Tensor bias, std::optional<float> weight_max_abs)
    : weight_(std::move(weight)), bias_(std::move(bias)), weight_max_abs_(weight_max_abs) {
  QEVAL_CHECK(weight_.defined() && weight_.dim() == 2, "FloatLinear: weight must be 2-D [out, in]");
  QEVAL_CHECK(!bias_.defined() || (bias_.dim() == 1 && bias_.size(0) == weight_.size(0)),
              "FloatLinear: bias must be [{}]", weight_.size(0));
}

at::Tensor FloatLinear::forward(const at::Tensor& x) const {
  TORCH_CHECK(x.size(-1) == weight_.size(1), "FloatLinear: input has ", x.size(-1), " features, weight expects ",
              weight_.size(1));
  // One GEMM per sequence: a GEMM's rounding can depend on M, so sharing one GEMM across the
  // batch would make a window's logits depend on its neighbours. Per sequence, results are
  // bit-identical for every batch size.
  // kernels/fp32_gemm.h: oneDNN's AVX-512 GEMM where it runs, LibTorch's otherwise.
  if (!weight_.device().is_cpu()) return bias_.defined() ? at::linear(x, weight_, bias_) : at::linear(x, weight_);
  auto one = [&](const at::Tensor& rows) { return kernels::fp32_linear_rows(rows, weight_, bias_); };
  if (x.dim() != 3 || x.size(0) == 1) return one(x);
  std::vector<at::Tensor> outputs;
  outputs.reserve(static_cast<std::size_t>(x.size(0)));
  for (std::int64_t b = 0; b < x.size(0); ++b) outputs.push_back(one(x[b]));
  return at::stack(outputs);
}

std::int64_t FloatLinear::weight_bytes() const {
  std::int64_t bytes = weight_.numel() * static_cast<std::int64_t>(weight_.element_size());
  if (bias_.defined()) bytes += bias_.numel() * static_cast<std::int64_t>(bias_.element_size());
  return bytes;
}

std::string FloatLinear::describe() const { return std::string(c10::toString(weight_.scalar_type())); }

}  // namespace qeval
