#include "quant/formats/compressed_tensors.h"

#include <fmt/format.h>

#include "common/error.h"
#include "quant/formats/minifloat.h"
#include "quant/formats/packed_bits.h"
#include "quant/formats/stored_tensors.h"

namespace qeval {

namespace {

void check_bits(int bits, std::string_view name) {
  QEVAL_CHECK(bits >= 1 && bits <= 8, "{}: num_bits {} is outside compressed-tensors' packing range [1, 8]", name, bits);
}

}  // namespace

at::Tensor ct_unpack_int32(const at::Tensor& packed, int bits, std::int64_t rows, std::int64_t cols, int packed_dim,
                           std::string_view name, std::string_view field) {
  check_bits(bits, name);
  const std::vector<std::int64_t> shape = packed_dim == 1 ? std::vector<std::int64_t>{rows, stream_words(cols, bits)}
                                                          : std::vector<std::int64_t>{stream_words(rows, bits), cols};
  const at::Tensor p = stored_tensor(packed, name, field, shape, {at::kInt});
  at::Tensor out = at::empty({rows, cols}, at::kInt);
  const std::int32_t* w = p.data_ptr<std::int32_t>();
  std::int32_t* o = out.data_ptr<std::int32_t>();
  const std::int32_t offset = 1 << (bits - 1);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint32_t f = packed_dim == 1 ? stream_field(w + r * shape[1], 1, c, bits) : stream_field(w + c, cols, r, bits);
      o[r * cols + c] = static_cast<std::int32_t>(f) - offset;
    }
  return out;
}

at::Tensor ct_dequantize_pack_quantized(const CtPackedWeight& w, int bits, const ScaleLayout& layout, std::int64_t N,
                                        std::int64_t K, std::string_view name) {
  check_bits(bits, name);
  const at::Tensor codes = ct_unpack_int32(w.weight_packed, bits, N, K, 1, name, "weight_packed").to(at::kFloat);
  const std::vector<std::int64_t> sshape = layout.scale_shape(N, K, name);
  const std::int64_t scale_count = sshape[0] * (sshape.size() > 1 ? sshape[1] : 1);
  QEVAL_CHECK(w.weight_scale.defined() && w.weight_scale.numel() == scale_count,
              "{}: weight_scale has shape {}, expected {} for the {} strategy", name,
              w.weight_scale.defined() ? shape_text(w.weight_scale.sizes()) : "(missing)", shape_text(sshape), layout.describe());
  const at::Tensor scale = float32_scales(w.weight_scale, name, "weight_scale").reshape(sshape);
  at::Tensor zero;
  if (w.weight_zero_point.defined()) {
    if (layout.kind == ScaleLayout::Kind::channel || layout.kind == ScaleLayout::Kind::group) {
      zero = ct_unpack_int32(w.weight_zero_point, bits, sshape[0], sshape[1], 0, name, "weight_zero_point");
    } else {
      QEVAL_CHECK(w.weight_zero_point.numel() == scale_count, "{}: weight_zero_point has shape {}, expected {} for the {} strategy",
                  name, shape_text(w.weight_zero_point.sizes()), shape_text(sshape), layout.describe());
      zero = stored_tensor(w.weight_zero_point, name, "weight_zero_point", w.weight_zero_point.sizes().vec(), {at::kChar})
                 .reshape(sshape);
    }
    zero = zero.to(at::kFloat);
  }
  return scaled_weight(codes, scale, zero, layout, name);
}

at::Tensor ct_dequantize_int_quantized(const at::Tensor& weight, const at::Tensor& weight_scale,
                                       const at::Tensor& weight_zero_point, int bits, const ScaleLayout& layout,
                                       std::int64_t N, std::int64_t K, std::string_view name) {
  check_bits(bits, name);
  const at::Tensor codes = stored_tensor(weight, name, "weight", {N, K}, {at::kChar}).to(at::kFloat);
  const std::vector<std::int64_t> sshape = layout.scale_shape(N, K, name);
  QEVAL_CHECK(weight_scale.defined() && weight_scale.numel() == sshape[0] * (sshape.size() > 1 ? sshape[1] : 1),
              "{}: weight_scale has shape {}, expected {} for the {} strategy", name,
              weight_scale.defined() ? shape_text(weight_scale.sizes()) : "(missing)", shape_text(sshape), layout.describe());
  const at::Tensor scale = float32_scales(weight_scale, name, "weight_scale").reshape(sshape);
  at::Tensor zero;
  if (weight_zero_point.defined())
    zero = stored_tensor(weight_zero_point, name, "weight_zero_point", weight_zero_point.sizes().vec(), {at::kChar})
               .reshape(sshape)
               .to(at::kFloat);
  return scaled_weight(codes, scale, zero, layout, name);
}

at::Tensor ct_dequantize_float_quantized(const at::Tensor& weight, const at::Tensor& weight_scale, const ScaleLayout& layout,
                                         std::int64_t N, std::int64_t K, std::string_view name) {
  const at::Tensor values = e4m3_to_float32(stored_tensor(weight, name, "weight", {N, K}, {at::kByte}), name, "weight", false);
  const std::vector<std::int64_t> sshape = layout.scale_shape(N, K, name);
  QEVAL_CHECK(weight_scale.defined() && weight_scale.numel() == sshape[0] * (sshape.size() > 1 ? sshape[1] : 1),
              "{}: weight_scale has shape {}, expected {} for the {} strategy", name,
              weight_scale.defined() ? shape_text(weight_scale.sizes()) : "(missing)", shape_text(sshape), layout.describe());
  return scaled_weight(values, float32_scales(weight_scale, name, "weight_scale").reshape(sshape), at::Tensor(), layout, name);
}

at::Tensor ct_dequantize_nvfp4(const at::Tensor& weight_packed, const at::Tensor& weight_scale,
                               const at::Tensor& weight_global_scale, std::int64_t N, std::int64_t K, std::string_view name) {
  QEVAL_CHECK(K % 16 == 0, "{}: NVFP4 needs the input features ({}) to be a multiple of its group of 16", name, K);
  const at::Tensor packed = stored_tensor(weight_packed, name, "weight_packed", {N, K / 2}, {at::kByte});
  const at::Tensor block = e4m3_to_float32(stored_tensor(weight_scale, name, "weight_scale", {N, K / 16}, {at::kByte}), name,
                                           "weight_scale", true);
  const at::Tensor global = float32_scales(weight_global_scale, name, "weight_global_scale");
  QEVAL_CHECK(global.numel() == 1, "{}: weight_global_scale has shape {}, expected [1]", name, shape_text(global.sizes()));
  const at::Tensor scale = block / global.reshape({});  // IEEE division per element, as `_dequantize`
  check_finite(scale, name, "weight_scale / weight_global_scale");
  at::Tensor values = at::empty({N, K}, at::kFloat);
  const std::uint8_t* p = packed.data_ptr<std::uint8_t>();
  float* v = values.data_ptr<float>();
  for (std::int64_t i = 0; i < N * K / 2; ++i) {
    v[2 * i] = element_value(p[i] & 0x0f, ElementType::e2m1);
    v[2 * i + 1] = element_value(p[i] >> 4, ElementType::e2m1);
  }
  ScaleLayout layout;
  layout.kind = ScaleLayout::Kind::group;
  layout.group = 16;
  return scaled_weight(values, scale, at::Tensor(), layout, name);
}

}  // namespace qeval
