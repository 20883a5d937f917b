// AWQ's mappings for one layer (issue 77 item 3): which previous op's output is scaled, which
// linears balance it, and whose output the search compares, as llm-compressor 0.14's
// AWQ_MAPPING_REGISTRY has them (modifiers/transform/awq/mappings.py). qeval supports the Llama
// family's `default_mappings` (Llama, Mistral, Qwen2, Qwen3: separate q/k/v, gated MLP with
// separate gate/up/down, a norm with one gain per channel before each branch), in this order:
//
//   attn_norm → q, k, v    parent: the attention mixer (llm-compressor's self_attn)
//   v → o                  parent: o; skipped when v's outputs are not o's inputs (grouped-query
//                          attention: llm-compressor's _check_layers_are_compatible)
//   mlp_norm → gate, up    parent: the MLP (post_attention_layernorm → mlp)
//   up → down              parent: down
//
// Other layouts are refused naming the model and what is supported: fused q/k/v or gate/up
// (GPT-2, Phi-3: llm-compressor's _phi_mappings fold into a fused linear's last rows, which
// qeval's fused layouts do not name), an ungated MLP (gelu(up) is not linear in up, so up → down
// cannot fold), MoE and Mamba layers, parallel residuals, sandwich norms (Gemma-2/3 drop or move
// mappings), a single-gain RMSNorm.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace qeval {

enum class AwqParent { mixer, ffn, linear };

struct AwqMapping {
  std::string name;                  // "layers.0.attn_norm → attn.q, attn.k, attn.v"
  std::string smooth;                // a norm ("layers.0.attn_norm") or a linear ("layers.0.attn.v")
  bool smooth_is_norm = false;
  std::vector<std::string> balance;  // canonical linear names, in the order their weights are searched
  AwqParent parent = AwqParent::linear;
  std::string parent_name;           // for the record: "layers.0.attn", "layers.0.mlp", or the linear
  std::string skipped;               // non-empty: why this mapping does not apply to this model
};

// The mappings of `layer`, in the order they are searched and folded. Throws naming `model` and
// the layout when the layer is not Llama-style (above).
std::vector<AwqMapping> awq_mappings(const ModelConfig& config, std::int64_t layer, const std::string& model);

}  // namespace qeval
