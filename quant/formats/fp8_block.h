// Fine-grained FP8 checkpoints (transformers' `quant_method: "fp8"`, FineGrainedFP8Config, as
// DeepSeek-V3 and Qwen3-FP8 ship them). For an [N, K] weight with weight_block_size [bn, bk]
// (128 × 128 in every published checkpoint):
//
//   weight            [N, K] E4M3 bytes (F8_E4M3)
//   weight_scale_inv  [ceil(N / bn), ceil(K / bk)] float32 (bfloat16 accepted): despite its name the
//                     factor that multiplies (the inverse of the quantiser's scale)
//
//   W[n, k] = e4m3(weight[n, k]) · weight_scale_inv[⌊n / bn⌋, ⌊k / bk⌋]   (float32, one rounding)
//
// A NaN element decodes to NaN, as the checkpoint stores it; a non-finite scale is an error.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string_view>

namespace qeval {

at::Tensor fp8_block_dequantize(const at::Tensor& weight, const at::Tensor& weight_scale_inv, std::int64_t block_rows,
                                std::int64_t block_cols, std::int64_t N, std::int64_t K, std::string_view name);

}  // namespace qeval
