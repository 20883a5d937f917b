// `smooth` (SmoothQuant, Xiao et al. 2023): migrate quantisation difficulty from activations to
// weights, per input channel j of a linear group: x_j / s_j and W[:, j] · s_j with
// s_j = max|X_j|^α / max|W[:, j]|^(1−α); the division is folded into what produces x (a norm's
// gain, or the rows of the previous linear), so the model computes the same function.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace qeval {

struct SmoothOptions {
  double alpha = 0.5;
  // Which input groups to smooth (all by default): "qkv" (attention input, folded into the
  // attention norm), "up" (MLP input: up and gate, folded into the MLP norm), "down" (folded
  // into the up projection's rows: SwiGLU only, since GELU is not linear), "o" (folded into the
  // value projection's rows; with grouped-query attention the o channels that read one value
  // channel share its scale).
  std::vector<std::string> groups = {"qkv", "up", "down", "o"};
};

// `input_max_abs(name)`: max |x_j| per input feature of the linear `name` (canonical, e.g.
// layers.0.attn.q) over the calibration windows, [in] (any float dtype), measured on the model
// as it is before this call. RMSNormSingle norms become per-channel RMSNorm (same function).
// In place, new tensors; float64 then fp32. Returns the record's entry: {"name": "smooth",
// "alpha", "groups": [...smoothed], "skipped": [{"group", "reason"}], "layers": [{"name", "channels",
// "scale_min", "scale_max", "act_max_before", "act_max_after"}...]}.
nlohmann::json smooth_model(ModelConfig& config, ModelWeights& weights, const SmoothOptions& options,
                            const std::function<at::Tensor(const std::string&)>& input_max_abs);

}  // namespace qeval
