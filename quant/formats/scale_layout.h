// Where the scale (and zero point) of element [n, k] of an [N, K] weight is stored, for the
// layouts compressed-tensors 0.20 (QuantizationStrategy) and the fine-grained FP8 checkpoints use:
//
//   tensor    scale [1] (or [], or [1, 1])           every element
//   channel   scale [N, 1] (or [N])                  row n
//   group g   scale [N, K / g]   (g must divide K)   row n, group ⌊k / g⌋
//   block     scale [⌈N / bn⌉, ⌈K / bk⌉]             block (⌊n / bn⌋, ⌊k / bk⌋); edge blocks may be short
//
// scaled_weight computes, in float32 and in this order, (value − zero) · scale for each element
// (without a zero point: value · scale), as compressed-tensors' `_dequantize` does with float32
// scales: value and zero are the stored codes widened exactly, the subtraction is exact for
// integer codes, and the product is the one rounding.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qeval {

struct ScaleLayout {
  enum class Kind { tensor, channel, group, block } kind = Kind::tensor;
  std::int64_t group = 0;          // group: g
  std::int64_t block_rows = 0;     // block: bn
  std::int64_t block_cols = 0;     // block: bk
  // The scale's shape for an [N, K] weight (checks g | K for groups); `name` for errors.
  std::vector<std::int64_t> scale_shape(std::int64_t N, std::int64_t K, std::string_view name) const;
  std::string describe() const;    // "tensor", "channel", "group 128", "block 128x128"
};

// values: [N, K] float32 (the codes or elements, widened); scale: float32, reshaped from any of
// the shapes above; zero: undefined or float32 of the scale's shape. Returns [N, K] float32.
at::Tensor scaled_weight(const at::Tensor& values, const at::Tensor& scale, const at::Tensor& zero, const ScaleLayout& layout,
                         std::string_view name);

}  // namespace qeval
