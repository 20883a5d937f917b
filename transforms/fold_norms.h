// Folding a model's norms into the linear layers that read them, the first step of a rotation
// (QuaRot, SliceGPT): afterwards every norm is a plain RMSNorm with gain 1, which commutes with
// any orthogonal Q: RMSNorm(x Q) = RMSNorm(x) Q.
#pragma once

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/weights.h"

namespace qeval {

// In place on `config` and `weights` (new tensors; the old ones are not modified, so tensors
// shared with another model stay as they were). Computed in float64, rounded to fp32 once.
//  - RMSNorm gain g: every reader W becomes W diag(g); the gain becomes 1 (per channel, [D]).
//  - RMSNormSingle gain g: readers W·g; the gain becomes 1 ([1]).
//  - LayerNorm: first the residual stream is made zero-mean in every position by subtracting the
//    channel mean from what writes to it (token and position embeddings, attention output and
//    MLP down projections, weights and biases); then LayerNorm(x) = RMSNorm(x)·g + β exactly, so
//    the norm becomes RMSNorm, g is folded as above and β goes into the readers' biases
//    (b + W β; the LM head gets a bias). Linear biases the config lacked are added (zeros for
//    the other layers of that kind) and the config's flags say so.
// Tied embeddings are untied (the LM head is scaled by the final norm's gain). Returns what was
// done: {"norm_before", "centered_residual_stream", "added_biases", "untied_embeddings"}.
nlohmann::json fold_norms(ModelConfig& config, ModelWeights& weights);

}  // namespace qeval
