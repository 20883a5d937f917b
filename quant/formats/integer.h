// The integer codecs (DESIGN.md §5): int8 absmax and 4-bit zero-point on tensors, the readable
// maths every kernel is held to. No scheme here: the caller says which dims a group reduces over.
//
// int8 absmax, per group G:   s = max_{x∈G} |x| / 127   (s = 1 for a group of zeros)
//                             q = clamp(round(x / s), −127, 127),   x̂ = q · s
// round() is round-half-to-even (at::round, as PyTorch); x / s is an IEEE division, never a
// multiplication by a reciprocal, so every implementation can reproduce q bit for bit.
//
// 4-bit zero-point, per group G:  s = (max − min) / 15,  z = round(−min / s),
//                                 q = clamp(round(x / s) + z, 0, 15),  x̂ = (q − z) · s
// A constant group c (max = min) would give s = 0; instead s = |c| (1 when c = 0) and
// z = 1 if c < 0 else 0, so q = round(c/|c|) + z ∈ {0, 1} and x̂ = (q − z) · |c| = c exactly.
// z is stored as float32: it leaves [0, 15] for all-positive or all-negative groups.
//
// Groups are given by the dims reduced over (kept as size-1 dims in scales and zeros).
#pragma once

#include <ATen/ATen.h>

namespace qeval {

// A constant divisor as a 0-dim tensor on like's device and dtype. ATen's CUDA division by a plain
// number multiplies by its reciprocal (one rounding more, and a last bit that can differ); its CPU
// division divides. A divisor tensor on the same device is divided by on both, so the GPU's
// scales, zero points and codes are the CPU's bit for bit (tests/gpu/device_quantize_test.cpp).
at::Tensor divisor(float value, const at::Tensor& like);

// int8 absmax scale over `reduce_dims` (keepdim), float32.
at::Tensor int8_absmax_scale(const at::Tensor& x, at::IntArrayRef reduce_dims);
// int8 codes for x with a scale broadcastable to x.
at::Tensor int8_quantize(const at::Tensor& x, const at::Tensor& scale);
// q · s as float32.
at::Tensor int8_dequantize(const at::Tensor& q, const at::Tensor& scale);

struct ZeroPointParams {
  at::Tensor scale;  // float32, keepdim over the reduced dims
  at::Tensor zero;   // float32, integral values
};
ZeroPointParams zeropoint4_params(const at::Tensor& x, at::IntArrayRef reduce_dims);
// uint8 codes in [0, 15].
at::Tensor zeropoint4_quantize(const at::Tensor& x, const ZeroPointParams& p);
// (q − z) · s as float32.
at::Tensor zeropoint4_dequantize(const at::Tensor& q, const ZeroPointParams& p);

}  // namespace qeval
