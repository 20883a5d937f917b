// AWQ's codes as a scheme's calibrated weights (quant/calibrated_weights.h): the search's options
// from a weights spec, and the folded weight's W4A16_ASYM round-to-nearest (awq_quantize) in the
// form the scheme executes.
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "quant/calibrated_weights.h"
#include "quant/calibration/awq_search.h"
#include "quant/schemes/spec.h"

namespace qeval {

// The search's and the quantiser's options for weights of kind int4_zeropoint with method awq:
// llm-compressor's arithmetic, asymmetric, the spec's group (0 per channel), grid and duo scaling.
AwqOptions awq_options(const QuantSpec& weights);

// A folded weight [N, K] float32 quantised with awq_quantize, packed for the 4-bit kernels (groups
// of consecutive columns, the last one shorter when the group does not divide K).
CalibratedWeight awq_calibrated_weight(const at::Tensor& folded_weight, const QuantSpec& weights,
                                       const std::string& name);

}  // namespace qeval
