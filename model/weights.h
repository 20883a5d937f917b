// ModelWeights: the one internal weight layout every loader produces (fp32, contiguous).
// Linear weights are [out_features, in_features] (PyTorch nn.Linear convention). Norm gains are the
// factors applied: a checkpoint that stores (1 + w) gains (HF Gemma) has the 1 added on load.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace qeval {

struct LinearWeights {
  at::Tensor weight;  // [out, in] float32
  at::Tensor bias;    // [out] float32, or undefined when the layer has no bias
};

struct NormWeights {
  at::Tensor weight;  // [D] (layernorm, rmsnorm) or [1] (rmsnorm_single)
  at::Tensor bias;    // [D] for layernorm, undefined otherwise
};

// A mixture-of-experts feed-forward (Mixtral, Qwen-MoE, Jamba): a router and E gated experts, each
// down(act(gate x) · up x), and optionally a shared expert every token goes through.
struct MoeWeights {
  at::Tensor router;  // [E, D], full precision (not a quantised linear)
  struct Expert {
    LinearWeights gate, up;  // [F_e, D]
    LinearWeights down;      // [D, F_e]
  };
  std::vector<Expert> experts;  // E
  Expert shared;                // [F_s, D] / [D, F_s], or undefined
  at::Tensor shared_gate;       // [1, D]: the shared expert's output × sigmoid(x · gᵀ), or undefined
};

// A state-space mixer. Mamba (S6): in_proj [2 d_inner, D] → x, z; causal depthwise conv over x;
// x_proj [dt_rank + 2N, d_inner] → dt, B, C; dt_proj [d_inner, dt_rank] (+ bias); A [d_inner, N];
// D [d_inner]; out_proj [D, d_inner]. Mamba-2 (SSD): in_proj [d_inner + conv + H, D] → z, xBC, dt;
// conv over xBC (conv = d_inner + 2 G N); dt_bias, A, D [H]; gated RMSNorm [d_inner]; out_proj.
struct SsmWeights {
  LinearWeights in_proj, x_proj, dt_proj, out_proj;  // x_proj, dt_proj: Mamba only
  at::Tensor conv_weight;  // [conv channels, d_conv]
  at::Tensor conv_bias;    // [conv channels] or undefined
  // A = −exp(A_log), computed on load in float32 as Hugging Face computes it (GGUF stores A itself):
  // [d_inner, N] (Mamba) or [H] (Mamba-2); always negative.
  at::Tensor A;
  at::Tensor D;        // [d_inner] (Mamba) or [H] (Mamba-2)
  at::Tensor dt_bias;  // [H], Mamba-2 only (Mamba's time-step bias is dt_proj's)
  NormWeights norm;    // Mamba-2's gated RMSNorm gains [d_inner]
  NormWeights dt_norm, b_norm, c_norm;  // Jamba: RMSNorm gains [dt_rank], [N], [N] (config.ssm_bcdt_norm)
};

struct BlockWeights {
  NormWeights attn_norm;
  // Attention input projection: fused (GPT-2 c_attn, rows = [q; k; v]) when config.fused_qkv,
  // else separate q [H*hd, D], k [Hkv*hd, D], v [Hkv*hd, D].
  LinearWeights qkv;
  LinearWeights q, k, v;
  LinearWeights o;      // [D, H*hd]
  NormWeights q_norm;   // [hd] per-head RMSNorm gains of q and k (config.qk_norm only)
  NormWeights k_norm;
  NormWeights post_attn_norm;  // [D] on the attention output before the residual add (config.sandwich_norms only)
  NormWeights mlp_norm;        // the MLP's input norm (Gemma-3: pre_feedforward_layernorm)
  LinearWeights up;       // [F, D] (GPT-2 c_fc; Llama up_proj / llama2.c w3)
  LinearWeights gate;     // [F, D] gated MLPs only (Llama gate_proj / llama2.c w1)
  LinearWeights gate_up;  // [2F, D] rows [gate; up] when config.fused_gate_up (Phi-3), instead of gate and up
  NormWeights post_mlp_norm;  // [D] on the MLP output before the residual add (config.sandwich_norms only)
  LinearWeights down;  // [D, F] (GPT-2 c_proj of the MLP; Llama down_proj / llama2.c w2)
  // [F, F] orthogonal, or undefined: the MLP's hidden activation is multiplied by it online
  // before the down projection (QuaRot's online Hadamard, set only by transforms/rotate).
  at::Tensor down_input_rotation;
  MoeWeights moe;  // FfnKind::moe layers only
  SsmWeights ssm;  // MixerKind::mamba / mamba2 layers only
};

struct ModelWeights {
  at::Tensor token_embedding;     // [V, D]
  at::Tensor position_embedding;  // [max_seq_len, D] for learned positions, undefined otherwise
  std::vector<BlockWeights> blocks;
  NormWeights final_norm;
  at::Tensor lm_head;  // [V, D]; the same tensor as token_embedding when tied
  // [V] or undefined. No checkpoint has one; transforms/ create it when they fold a LayerNorm's
  // bias into the LM head.
  at::Tensor lm_head_bias;
};

// Checks every shape, dtype and presence against `config`; throws naming `source`, the
// tensor, the expected and the found shape.
void validate_weights(const ModelWeights& weights, const ModelConfig& config, const std::string& source);
// The same checks for one block (tensor names "layers.{layer}.…") and for the final norm and head.
void validate_block_weights(const BlockWeights& block, const ModelConfig& config, std::int64_t layer,
                            const std::string& source);
void validate_head_weights(const ModelWeights& weights, const ModelConfig& config, const std::string& source);

// Every tensor of a block (defined or not) with its canonical name ("layers.3.attn.q.weight",
// "layers.3.moe.experts.5.up.weight", "layers.3.mamba.A", ...), for validation, placement and sizes.
std::vector<std::pair<std::string, at::Tensor*>> block_tensor_slots(BlockWeights& block, std::int64_t layer);
// A block's defined tensors with their canonical names ("layers.3.attn.q.weight", ...).
std::vector<std::pair<std::string, at::Tensor>> named_tensors(const BlockWeights& block, std::int64_t layer);

// The first NaN or infinity of a floating-point `t` in row-major order; nullopt when there is none.
struct NonFiniteElement {
  std::vector<std::int64_t> index;
  double value = 0;
};
std::optional<NonFiniteElement> first_non_finite(const at::Tensor& t);

// Throws naming `source`, the tensor `name` and its first non-finite element (index and value)
// when `t` holds a NaN or an infinity (DESIGN.md §9: a checkpoint never yields a number silently).
void check_finite(const at::Tensor& t, const std::string& name, const std::string& source);
// check_finite, keeping what its one pass computed: max |t| when `t` is a contiguous float32 CPU
// tensor (a maximum is exact in any order, so it is the value a quantiser's own pass would find),
// nullopt for any other tensor (checked all the same).
std::optional<float> checked_max_abs(const at::Tensor& t, const std::string& name, const std::string& source);
// checked_max_abs of every tensor of a block: the maxima by named_tensors' name (what Block takes),
// for the tensors it read on the fast path.
std::map<std::string, float> checked_block_max_abs(const BlockWeights& block, std::int64_t layer,
                                                   const std::string& source);

}  // namespace qeval
