// Quantised linear weights as stored for execution (DESIGN.md §5; STYLE item 3): data + scales
// (+ zeros) + an explicit layout, made once when a model is rewritten. The maths is
// quant/quantize.h's; the 4-bit layout is kernels/w4_gemm.h's.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>

#include "quant/schemes/spec.h"

namespace qeval {

// int8 absmax weight.
struct Int8Weight {
  at::Tensor q;                 // [N, K] int8, one output channel per row
  at::Tensor scales;            // float32: [1] per tensor, [N] per channel, [N, G] for group:g (G = ceil(K/g))
  std::int64_t group_size = 0;  // g for group granularity, else 0

  std::int64_t out_features() const { return q.size(0); }
  std::int64_t in_features() const { return q.size(1); }
  // [N, K] q · s: float32 (the reference path's weights), or float64 (exact: `--dtype fp64`).
  at::Tensor dequantize(at::ScalarType dtype = at::kFloat) const;
  std::int64_t bytes() const;  // codes + scales
};

// 4-bit zero-point weight, in the layout of kernels/w4_gemm.h.
struct W4Weight {
  at::Tensor qweight;           // [N, ceil(K/2)] uint8, low nibble = even k, odd K padded with a 0 nibble
  at::Tensor scales;            // [N, G] float32
  at::Tensor zeros;             // [N, G] float32, integral
  std::int64_t K = 0;
  std::int64_t group_size = 0;  // K for per channel (G = 1); per tensor is stored as per channel
                                // with every row holding the one tensor-wide scale and zero

  std::int64_t out_features() const { return qweight.size(0); }
  std::int64_t in_features() const { return K; }
  at::Tensor dequantize() const;  // [N, K] float32, (q − z) · s
  std::int64_t bytes() const;     // packed codes + scales + zeros
};

// w: [N, K] float32 with finite values; spec.kind must match the function. `name` is for errors.
// `max_abs`: max |w| when the caller has read w whole already (FloatLinear::weight_max_abs): a
// per-tensor scale on the CPU then takes one pass over w instead of two, with the same bits.
Int8Weight quantize_int8_weight(const at::Tensor& w, const QuantSpec& spec, const std::string& name,
                                std::optional<float> max_abs = std::nullopt);
// On the CPU 4-bit weights go through kernels/w4_quantize.h's fused pass; on a GPU, and for tests,
// through the reference composition of quant/quantize.h (zeropoint4_params, zeropoint4_quantize,
// pack_u4), which gives the same bits.
W4Weight quantize_w4_weight(const at::Tensor& w, const QuantSpec& spec, const std::string& name);
W4Weight quantize_w4_weight_reference(const at::Tensor& w, const QuantSpec& spec, const std::string& name);

}  // namespace qeval
