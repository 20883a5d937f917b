// Fresh weights for a ModelConfig: GPT-2-style initialisation (normal, std 0.02; residual
// output projections scaled by 1/sqrt(2·n_layers); norms at gain 1, biases 0). Used for
// training from scratch, synthetic benchmark models and tests.
//
// State-space mixers (a layer pattern, model/block.h) follow Mamba's initialisation (mamba_ssm,
// HF's MambaPreTrainedModel._init_weights) where it is specific to them, and the rules above for
// their linears (in_proj, x_proj normal(std); out_proj, a residual writer, normal(residual std)):
//   A        S4D-real: Mamba A[e, n] = −(n + 1), [d_inner, N]; Mamba-2 A[h] = −(h + 1), [H] (as HF)
//   D        1
//   Δ bias   softplus⁻¹(Δ), Δ log-uniform in [0.001, 0.1], floored at 1e-4 (Mamba: dt_proj's bias,
//            Mamba-2: dt_bias)
//   dt_proj  weight uniform in ±dt_rank^−½ (time_step_scale 1)
//   conv     weight and bias uniform in ±1/√d_conv (nn.Conv1d's default for a depthwise conv)
//   norms    gain 1 (Mamba-2's gated norm, Jamba's Δ/B/C norms)
// A layer pattern draws from the same generator in layer order, so a model without one gets the
// same weights as before. Mixture-of-experts layers are refused.
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
