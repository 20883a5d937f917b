#include "quant/calibration/hessian.h"

#include "common/error.h"

namespace qeval {

HessianAccumulator::HessianAccumulator(std::int64_t in_features)
    : sum_(at::zeros({in_features, in_features}, at::kDouble)) {}

void HessianAccumulator::add(const at::Tensor& x) {
  const std::int64_t K = sum_.size(0);
  QEVAL_CHECK((x.dim() == 3 || x.dim() == 2) && x.size(-1) == K,
              "HessianAccumulator: expected an input [B, L, {}] or [T, {}], got {} dimensions, the last of size {}", K,
              K, x.dim(), x.dim() > 0 ? x.size(-1) : 0);
  const at::Tensor rows = x.reshape({-1, K}).to(at::kDouble);
  sum_.addmm_(rows.t(), rows);
  samples_ += x.dim() == 3 ? x.size(0) : 1;
  rows_ += rows.size(0);
}

at::Tensor HessianAccumulator::hessian() const {
  if (samples_ == 0) return at::zeros_like(sum_, at::kFloat);
  return (sum_ * (2.0 / static_cast<double>(samples_))).to(at::kFloat);
}

}  // namespace qeval
