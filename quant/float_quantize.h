// The floating-point formats on tensors (issue 61): FP8 with tensor / channel / token scales,
// OCP MX blocks, NVFP4, and static (calibrated) activation scales for int8 and FP8. The element
// maths is quant/formats/minifloat.h, quant/formats/mx.h and quant/formats/nvfp4.h; this file applies it to weights
// [N, K] and to activations [B, L, K], threaded over rows.
//
// On the CPU there is no FP8/FP6/FP4 arithmetic: a layer's weight is quantised and dequantised
// once, when the layer is built, and its activations per forward; the product of the dequantised
// values runs as a float32 GEMM (exact products, float32 accumulation). Activations are reduced
// per sequence (axis 0), never across the batch, so results do not depend on the batch size.
//   fp8    scale = amax / largest finite (1 where amax = 0), per tensor or output channel
//          (weights), per sequence or token (activations); x̂ = E(clamp(x / scale)) · scale
//   mx     per block of 32 along K (a weight row, a token)
//   nvfp4  per block of 16 along K, with the tensor scale of the weight, or of the sequence
// float64 inputs (`--dtype fp64`) take the reference element rounding in float64.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include <optional>

#include "quant/schemes/spec.h"

namespace qeval {

// w: [N, K] float32, finite; spec.is_float_format(). → x̂ [N, K] float32. `max_abs`: max |w| when
// the caller has read w whole already (FloatLinear::weight_max_abs): a per-tensor FP8 scale and
// NVFP4's tensor scale then take no pass of their own, with the same bits.
at::Tensor fake_quantize_float_weight(const at::Tensor& w, const QuantSpec& spec,
                                      std::optional<float> max_abs = std::nullopt);

// x: [B, L, K] float32 or float64; spec.is_float_format(), not static.
at::Tensor fake_quantize_float_activations(const at::Tensor& x, const QuantSpec& spec);

// The static scale of a calibrated amax: amax / 127 (int8) or amax / largest finite (fp8), in
// float32 (amax rounded to float32 first); 1 where amax is 0.
float static_activation_scale(const QuantSpec& spec, double amax);
// x̂ under a static scale s: int8 clamp(round_half_even(x / s), ±127) · s, fp8 E(clamp(x / s)) · s.
// Values beyond the calibrated range saturate. x: [B, L, K] float32 or float64.
at::Tensor fake_quantize_static(const at::Tensor& x, const QuantSpec& spec, float scale);

// Bytes of a weight stored in the format: elements at their bit width, plus scales (fp8: one
// float32 per tensor or channel; mx: one E8M0 byte per block; nvfp4: one E4M3 byte per block and
// one float32 per tensor).
std::int64_t float_format_weight_bytes(const QuantSpec& spec, std::int64_t N, std::int64_t K);

}  // namespace qeval
