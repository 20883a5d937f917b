// Fresh weights for a ModelConfig: GPT-2-style initialisation (normal, std 0.02; residual
// output projections scaled by 1/sqrt(2·n_layers); norms at gain 1, biases 0). Used for
// training from scratch, synthetic benchmark models and tests.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/weights.h"

namespace qeval {

ModelWeights init_weights(const ModelConfig& config, std::uint64_t seed, double std = 0.02);

// GPT-2 small's shape (124 M parameters: 12 × 768, 12 heads, vocab 50257, 1024 learned
// positions, LayerNorm, GELU, biases, tied head, fused qkv), for synthetic benchmark models.
ModelConfig gpt2_small_config();

}  // namespace qeval
