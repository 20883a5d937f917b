// What a calibrated weight quantiser (GPTQ, quant/calibration/) made for one scheme: each selected
// linear's codes in the form the scheme executes them, made once before the evaluation
// (eval/weight_calibration_pass.h) and read by QuantizedLinear in place of its own round-to-nearest
// (SchemeSpec::calibrated_weights). The form is quant/'s; how it is made is calibration/'s.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "quant/packed_weights.h"

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

}  // namespace qeval
