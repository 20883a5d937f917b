// What a calibrated weight quantiser (GPTQ, AWQ; quant/calibration/) made for one scheme: each selected
// linear's codes in the form the scheme executes them (and the block tensors AWQ's fold changed), made once before the evaluation
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
  // Block tensors the calibration changed besides the codes in by_name, by named_tensors' name
  // ("layers.3.attn_norm.weight"): AWQ's folded norm gains, the biases it divided, and the folded
  // weights of linears the scheme leaves in full precision. SchemeRewrite::rewrite puts them in the
  // block before it quantises (Block::with_tensors); GPTQ replaces none.
  std::map<std::string, at::Tensor> replaced_tensors;
  nlohmann::json description;  // the record's account (calibration, losses)
};

}  // namespace qeval
