// GPTQ's solves as a scheme's calibrated weights (quant/calibrated_weights.h): the solver's options
// from a weights spec, and its result in the form the scheme executes.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "quant/calibration/gptq_solve.h"
#include "quant/calibrated_weights.h"
#include "quant/schemes/spec.h"

namespace qeval {

// The solver's options for a weights spec of kind int4_zeropoint with method gptq.
GptqOptions gptq_options(const QuantSpec& weights);

// The solver's result in the scheme's executable form (see CalibratedWeight).
CalibratedWeight calibrated_weight(const GptqResult& result, const QuantSpec& weights, const std::string& name);

}  // namespace qeval
