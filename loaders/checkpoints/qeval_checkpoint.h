// qeval's own checkpoints (what `qeval train` writes): a folder with
//   config.json        config_to_json(config) ("format": "qeval", every switch explicit) plus
//                      "metadata": the caller's extra facts (step, tokens seen, data, ...);
//   model.safetensors  the weights under the canonical names below, in their own dtype
//                      (float32, or F16/BF16/F64, which load as float32).
//
// Canonical tensor names (the same names Transformer gives its linears and validate_weights
// uses in messages), D = d_model, F = d_ff, hd = head_dim, H / Hkv = n_heads / n_kv_heads:
//   token_embedding                         [V, D]
//   position_embedding                      [max_seq_len, D]       learned positions only
//   layers.{i}.attn_norm.weight             [D] ([1] for rmsnorm_single)
//   layers.{i}.attn_norm.bias               [D]                    layernorm only
//   layers.{i}.attn.qkv.weight              [(H + 2 Hkv) hd, D]    fused_qkv (rows q; k; v)
//   layers.{i}.attn.{q,k,v}.weight          [H hd | Hkv hd, D]     otherwise
//   layers.{i}.attn.o.weight                [D, H hd]
//   layers.{i}.mlp_norm.{weight,bias}       as attn_norm
//   layers.{i}.mlp.up.weight                [F, D]
//   layers.{i}.mlp.gate.weight              [F, D]                 swiglu only
//   layers.{i}.mlp.down.weight              [D, F]
//   <linear>.bias                           [out]                  attention_bias / mlp_bias
// A layer pattern (config layer_mixers / layer_ffns): a Mamba layer has, instead of attn.*,
// E = ssm_d_inner, N = ssm_d_state, R = ssm_dt_rank, K = ssm_d_conv, C = conv channels:
//   layers.{i}.mamba.in_proj.weight         [2E, D] (Mamba-2: [E + C + H_ssm, D])
//   layers.{i}.mamba.conv.{weight,bias}     [C, K], [C]            bias when ssm_conv_bias
//   layers.{i}.mamba.x_proj.weight          [R + 2N, E]            Mamba
//   layers.{i}.mamba.{dt,b,c}_norm.weight   [R], [N], [N]          ssm_bcdt_norm (Jamba)
//   layers.{i}.mamba.dt_proj.{weight,bias}  [E, R], [E]            Mamba
//   layers.{i}.mamba.dt_bias                [H_ssm]                Mamba-2
//   layers.{i}.mamba.A, layers.{i}.mamba.D  [E, N] and [E] (Mamba-2: [H_ssm] each); A itself (negative)
//   layers.{i}.mamba.norm.weight            [E]                    Mamba-2's gated norm
//   layers.{i}.mamba.out_proj.weight        [D, E]
// and a layer whose feed-forward is "none" has no mlp_norm and no mlp.*. Mixture-of-experts
// layers are refused.
//   final_norm.{weight,bias}                as attn_norm
//   lm_head.weight                          [V, D]                 absent when tied_embeddings
// Loading is strict: every expected tensor present with its shape, no tensor left over.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace qeval {

// The weights under their canonical names (tensors shared, not copied). Validates first.
std::map<std::string, at::Tensor> qeval_named_tensors(const ModelConfig& config, const ModelWeights& weights);

// Writes a qeval checkpoint into `dir` (created if missing): model.safetensors first, then
// config.json, each atomically, so a folder with a config.json always has complete weights.
// `extra_metadata` (a JSON object) is stored under "metadata" in config.json and comes back
// in LoadedCheckpoint::notes["metadata"].
void save_qeval_checkpoint(const std::filesystem::path& dir, const ModelConfig& config, const ModelWeights& weights,
                           const nlohmann::json& extra_metadata = nlohmann::json::object());

}  // namespace qeval
