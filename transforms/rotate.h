// `rotate`: computational-invariance rotation of the residual stream (QuaRot, SpinQuant; DESIGN
// §5 Transforms). The model computes the same function with its residual stream in another
// basis, in which no channel is privileged: an outlier channel is spread over all of them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace qeval {

struct RotateOptions {
  std::string kind = "hadamard";  // hadamard (randomised) | orthogonal (seeded QR)
  std::uint64_t seed = 0;
  // QuaRot's online rotation of the MLP down projection's input: a randomised Hadamard of order
  // d_ff applied to the hidden activation in the forward pass, its transpose folded into the
  // down projection, so that projection's input has no outlier channel either.
  bool online_down = false;
};

// Folds the norms (transforms/fold_norms.h), then with the orthogonal Q [D, D]: embeddings
// E Q (token and position), writers Qᵀ W and b Q (attention output, MLP down), readers W Q
// (q/k/v or fused qkv, up/gate, the LM head). In place, new tensors; float64 then fp32.
// Returns the record's entry: {"name": "rotate", "kind", "seed", "hadamard_factors" (kind
// hadamard), "online_down", "fold": fold_norms' report, "orthogonality_error": max|QᵀQ − I|}.
nlohmann::json rotate_model(ModelConfig& config, ModelWeights& weights, const RotateOptions& options);

// The orthogonal matrix rotate_model uses for `options` and width n (float64).
at::Tensor rotation_matrix(std::int64_t n, const RotateOptions& options);

}  // namespace qeval
