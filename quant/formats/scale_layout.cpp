#include "quant/formats/scale_layout.h"

#include <fmt/format.h>

#include "common/error.h"

namespace qeval {

std::vector<std::int64_t> ScaleLayout::scale_shape(std::int64_t N, std::int64_t K, std::string_view name) const {
  switch (kind) {
    case Kind::tensor: return {1};
    case Kind::channel: return {N, 1};
    case Kind::group:
      QEVAL_CHECK(group > 0 && K % group == 0, "{}: group size {} does not divide the {} input features", name, group, K);
      return {N, K / group};
    case Kind::block:
      QEVAL_CHECK(block_rows > 0 && block_cols > 0, "{}: block structure {}x{} must be positive", name, block_rows, block_cols);
      return {N / block_rows + (N % block_rows != 0), K / block_cols + (K % block_cols != 0)};
  }
  return {};
}

std::string ScaleLayout::describe() const {
  switch (kind) {
    case Kind::tensor: return "tensor";
    case Kind::channel: return "channel";
    case Kind::group: return fmt::format("group {}", group);
    case Kind::block: return fmt::format("block {}x{}", block_rows, block_cols);
  }
  return "";
}

at::Tensor scaled_weight(const at::Tensor& values, const at::Tensor& scale, const at::Tensor& zero, const ScaleLayout& layout,
                         std::string_view name) {
  const std::int64_t N = values.size(0), K = values.size(1);
  const std::vector<std::int64_t> shape = layout.scale_shape(N, K, name);
  const std::int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
  QEVAL_CHECK(scale.numel() == rows * cols, "{}: the {} scale holds {} values, expected {} ({})", name, layout.describe(),
              scale.numel(), rows * cols, fmt::join(shape, " x "));
  QEVAL_CHECK(!zero.defined() || zero.numel() == rows * cols, "{}: the {} zero point holds {} values, expected {}", name,
              layout.describe(), zero.numel(), rows * cols);
  const at::Tensor v = values.contiguous(), s = scale.contiguous(), z = zero.defined() ? zero.contiguous() : zero;
  at::Tensor out = at::empty({N, K}, at::kFloat);
  const float *pv = v.data_ptr<float>(), *ps = s.data_ptr<float>(), *pz = z.defined() ? z.data_ptr<float>() : nullptr;
  float* po = out.data_ptr<float>();
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t k = 0; k < K; ++k) {
      std::int64_t i = 0;
      switch (layout.kind) {
        case ScaleLayout::Kind::tensor: i = 0; break;
        case ScaleLayout::Kind::channel: i = n; break;
        case ScaleLayout::Kind::group: i = n * cols + k / layout.group; break;
        case ScaleLayout::Kind::block: i = (n / layout.block_rows) * cols + k / layout.block_cols; break;
      }
      const float x = pz ? pv[n * K + k] - pz[i] : pv[n * K + k];
      po[n * K + k] = x * ps[i];
    }
  }
  return out;
}

}  // namespace qeval
