// A scheme's activation quantisation on a tensor (DESIGN.md §5): which codec and which groups a
// QuantSpec asks for, applied per sequence. The codecs themselves are quant/formats/integer.h
// (int8 absmax, 4-bit zero-point) and quant/float_quantize.h (FP8, MX, NVFP4).
#pragma once

#include <ATen/ATen.h>

#include "quant/formats/integer.h"
#include "quant/schemes/spec.h"

namespace qeval {

// Quantise then dequantise activations x [B, L, K] under `spec` (kind none: x unchanged).
// Axis 0 is the sequence: "tensor" reduces over (L, K) per sequence, "token" over K per
// position, "feature" over L per channel of each sequence — never across sequences.
at::Tensor fake_quantize_activations(const at::Tensor& x, const QuantSpec& spec);

}  // namespace qeval
