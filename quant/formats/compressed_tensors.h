// compressed-tensors 0.20 (llm-compressor's checkpoint format): the weight codecs of its
// compressors, as compressed_tensors/compressors/*/base.py store them and
// quantization/lifecycle/forward_helpers.py `_dequantize` reads them. For an [N, K] weight
// (out_features × in_features) with scale layout L (scale_layout.h: tensor, channel, group, block):
//
//   pack-quantized        weight_packed      [N, ceil(K·b / 32)] int32: each row a dense LSB-first
//                                            stream (packed_bits.h) of b-bit fields (1 ≤ b ≤ 8) holding
//                                            code + 2^(b−1), code ∈ [−2^(b−1), 2^(b−1) − 1]
//                         weight_shape       [2] int: N, K
//                         weight_scale       L's shape, float32 / float16 / bfloat16
//                         weight_zero_point  asymmetric channel / group: [ceil(N·b / 32), G] int32, each
//                                            column a stream along N (packed_dim 0) with the same offset;
//                                            asymmetric tensor: [1] int8 as is; symmetric: absent
//   int-quantized,        weight             [N, K] int8 codes
//   naive-quantized       weight_scale       L's shape; weight_zero_point (asymmetric) L's shape, int8
//   float-quantized       weight             [N, K] E4M3 bytes (F8_E4M3)
//                         weight_scale       L's shape, float32 / float16 / bfloat16
//   nvfp4-pack-quantized  weight_packed      [N, K / 2] uint8: two E2M1 codes per byte, low nibble = even k
//                         weight_scale       [N, K / 16] E4M3 bytes
//                         weight_global_scale [1] float32
//
// Values, in float32: (code − zero) · scale for the integer formats (zero 0 when symmetric),
// element · scale for float-quantized, and element · (scale / global_scale) for NVFP4 (the
// division first, as `_dequantize` does), with every stored scale widened exactly. Where the
// library's own decompress runs in the scale's dtype (bfloat16 for NVFP4: unpack_fp4_from_uint8's
// default), qeval stays in float32 (docs/quantized-checkpoints.md). Non-finite scales, mis-sized
// tensors and bit widths outside [1, 8] are errors naming the weight and the field.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string_view>

#include "quant/formats/scale_layout.h"

namespace qeval {

// The signed codes of a pack-quantized stream tensor: `packed` [rows, ceil(cols·b / 32)] int32
// packed along dim 1 (packed_dim 1), or [ceil(rows·b / 32), cols] packed along dim 0 → [rows, cols]
// int32 codes (field − 2^(b−1)), as compressed-tensors' unpack_from_int32.
at::Tensor ct_unpack_int32(const at::Tensor& packed, int bits, std::int64_t rows, std::int64_t cols, int packed_dim,
                           std::string_view name, std::string_view field);

// The tensors of one pack-quantized weight (names as stored, without the module prefix).
struct CtPackedWeight {
  at::Tensor weight_packed, weight_scale, weight_zero_point;  // zero point undefined when symmetric
};
at::Tensor ct_dequantize_pack_quantized(const CtPackedWeight& w, int bits, const ScaleLayout& layout, std::int64_t N,
                                        std::int64_t K, std::string_view name);

// int-quantized / naive-quantized: weight int8 [N, K], zero point int8 of the scale's shape.
at::Tensor ct_dequantize_int_quantized(const at::Tensor& weight, const at::Tensor& weight_scale,
                                       const at::Tensor& weight_zero_point, int bits, const ScaleLayout& layout,
                                       std::int64_t N, std::int64_t K, std::string_view name);

// float-quantized (FP8 E4M3): weight uint8 [N, K] E4M3 bytes.
at::Tensor ct_dequantize_float_quantized(const at::Tensor& weight, const at::Tensor& weight_scale, const ScaleLayout& layout,
                                         std::int64_t N, std::int64_t K, std::string_view name);

// nvfp4-pack-quantized (group 16; K even).
at::Tensor ct_dequantize_nvfp4(const at::Tensor& weight_packed, const at::Tensor& weight_scale,
                               const at::Tensor& weight_global_scale, std::int64_t N, std::int64_t K, std::string_view name);

}  // namespace qeval
