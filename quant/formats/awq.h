// AWQ GEMM checkpoints (AutoAWQ 0.2.9, `WQLinear_GEMM.from_linear`; version "gemm"): 4-bit codes
// with a 4-bit zero and an fp16 scale per group of `group_size` input channels. For an [N, K]
// weight, G = K / group_size, and the codes stored [K, N] (input-major, as AutoAWQ transposes):
//
//   qweight  [K, N / 8] int32   word c of row k holds columns 8c + kAwqOrder[i] at bits [4i, 4i + 4)
//   qzeros   [G, N / 8] int32   the same interleave for the zeros of group g
//   scales   [G, N] float16 (bfloat16, float32 accepted)
//
//   kAwqOrder = [0, 2, 4, 6, 1, 3, 5, 7]   (AutoAWQ's order_map; awq/utils/packing_utils.py AWQ_ORDER)
//   W[n, k] = (code − zero) · scale, float32, one rounding (AutoAWQ's dequantize_gemm with float32 scales)
//
// AWQ's smoothing is folded into the preceding norms and linears: the weight read here is what
// reaches the output together with those folded tensors.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <string_view>

namespace qeval {

inline constexpr std::array<int, 8> kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7};

// [N, K] float32. bits must be 4 (the only width AutoAWQ's GEMM packing defines).
at::Tensor awq_gemm_dequantize(const at::Tensor& qweight, const at::Tensor& qzeros, const at::Tensor& scales, int bits,
                               std::int64_t group_size, std::int64_t N, std::int64_t K, std::string_view name);

}  // namespace qeval
