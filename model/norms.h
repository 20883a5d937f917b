// The norms every block kind shares (DESIGN.md §3): LayerNorm, RMSNorm with per-channel gains and
// RMSNormSingle with one gain, as ModelConfig::norm says; and the per-head RMSNorm of q and k.
#pragma once

#include <ATen/ATen.h>

#include "model/config.h"
#include "model/weights.h"

namespace qeval {

// RMSNorm over the last axis with gains `w` (broadcast: [D], [1], or [hd] for per-head q/k norms).
// Half precision (GPU): the mean square in fp32, as Hugging Face's Llama does (x² overflows fp16
// beyond |x| = 256), normalised in fp32, rounded to the compute dtype, then the gain.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps);

// The model's norm (config.norm) of x [..., D].
at::Tensor apply_norm(const at::Tensor& x, const NormWeights& w, const ModelConfig& config);

}  // namespace qeval
