// What a calibrated weight quantiser (GPTQ, quant/calibration/gptq_solve.h) made for one scheme:
// each selected linear's codes in the form the scheme executes them, made once before the
// evaluation (eval/weight_calibration_pass.h) and read by QuantizedLinear in place of its own
// round-to-nearest.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "quant/calibration/gptq_solve.h"
#include "quant/packed_weights.h"
#include "quant/schemes/spec.h"

namespace qeval {

struct CalibratedWeight {
  // 4-bit codes whose groups are runs of consecutive columns: the w4 kernels' layout
  // (kernels/w4_gemm.h), the same (q − z) · s as the solver's.
  std::optional<W4Weight> w4;
  // Otherwise (activation order "group": each column's group is its g_idx entry, not k / g), the
  // [N, K] float32 (q − z) · s that the reference path multiplies, and the g_idx.
  at::Tensor dequantized;
  at::Tensor group_of_column;  // [K] int32, defined with `dequantized`
  std::int64_t bytes = 0;      // packed codes + float32 scales and zeros (+ int32 g_idx)

  at::Tensor dequantize() const { return w4 ? w4->dequantize() : dequantized; }
};

struct CalibratedWeights {
  std::map<std::string, CalibratedWeight> by_name;  // canonical linear name
  nlohmann::json description;                        // the record's account (calibration, losses)
};

// The solver's options for a weights spec of kind int4_zeropoint with method gptq.
GptqOptions gptq_options(const QuantSpec& weights);

// The solver's result in the scheme's executable form (see CalibratedWeight).
CalibratedWeight calibrated_weight(const GptqResult& result, const QuantSpec& weights, const std::string& name);

}  // namespace qeval
