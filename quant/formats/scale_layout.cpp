#include "quant/formats/scale_layout.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>

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
  // Rows in parallel; along a row, runs of k that share one scale (and zero), so that the inner
  // loop is one subtraction and one product per element, vectorised: the same two float32
  // roundings per element as element by element, so the same bits.
  const std::int64_t run = layout.kind == ScaleLayout::Kind::group   ? layout.group
                           : layout.kind == ScaleLayout::Kind::block ? layout.block_cols
                                                                     : K;
  at::parallel_for(0, N, std::max<std::int64_t>(1, (1 << 16) / std::max<std::int64_t>(K, 1)), [&](std::int64_t n0, std::int64_t n1) {
    for (std::int64_t n = n0; n < n1; ++n) {
      for (std::int64_t k0 = 0; k0 < K; k0 += run) {
        std::int64_t i = 0;
        switch (layout.kind) {
          case ScaleLayout::Kind::tensor: i = 0; break;
          case ScaleLayout::Kind::channel: i = n; break;
          case ScaleLayout::Kind::group: i = n * cols + k0 / layout.group; break;
          case ScaleLayout::Kind::block: i = (n / layout.block_rows) * cols + k0 / layout.block_cols; break;
        }
        const std::int64_t k1 = std::min(K, k0 + run);
        const float sc = ps[i];
        const float* in = pv + n * K;
        float* o = po + n * K;
        if (pz) {
          const float zp = pz[i];
          for (std::int64_t k = k0; k < k1; ++k) o[k] = (in[k] - zp) * sc;
        } else {
          for (std::int64_t k = k0; k < k1; ++k) o[k] = in[k] * sc;
        }
      }
    }
  });
  return out;
}

}  // namespace qeval
