#include "quant/formats/fp8_block.h"

#include "common/error.h"
#include "quant/formats/scale_layout.h"
#include "quant/formats/stored_tensors.h"

namespace qeval {

at::Tensor fp8_block_dequantize(const at::Tensor& weight, const at::Tensor& weight_scale_inv, std::int64_t block_rows,
                                std::int64_t block_cols, std::int64_t N, std::int64_t K, std::string_view name) {
  ScaleLayout layout;
  layout.kind = ScaleLayout::Kind::block;
  layout.block_rows = block_rows;
  layout.block_cols = block_cols;
  const at::Tensor values = e4m3_to_float32(stored_tensor(weight, name, "weight", {N, K}, {at::kByte}), name, "weight", false);
  const at::Tensor scale = float32_scales(
      stored_tensor(weight_scale_inv, name, "weight_scale_inv", layout.scale_shape(N, K, name), {at::kFloat, at::kBFloat16}),
      name, "weight_scale_inv");
  return scaled_weight(values, scale, at::Tensor(), layout, name);
}

}  // namespace qeval
