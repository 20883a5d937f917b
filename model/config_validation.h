// One validator for ModelConfig, whatever the file it came from (Hugging Face config.json, GGUF
// metadata, qeval's own config.json, a llama2.c header). Every refusal names the file, the key as
// that file spells it, and the value it holds there.
//
// A loader reads each value it maps onto the config through a ConfigSource: the value's JSON type
// and its domain (the one table in config_validation.cpp) are checked as it is read, before
// anything is derived from it, and the key is remembered. ModelConfig::validate(source) then checks
// what involves several fields (heads divisible, kv heads <= heads, one window per layer, ids in the
// vocabulary) and names the keys the loader gave.
//
// Domains (the same rule for every family):
//   sizes (vocab, width, MLP width, layers, heads, kv heads, head size, rotary channels, windows,
//     window pattern)                                 integers >= 1
//   context length (max_position_embeddings ...)      an integer >= 0 (0: not stated; learned
//                                                     positions need >= 1, checked by validate)
//   norm eps, RoPE bases, attention scale, soft caps,
//     embedding scale, query_pre_attn_scalar          finite and > 0
//   rotary fraction (partial_rotary_factor, rotary_pct) in (0, 1]
//   rope scaling                                      null, or an object whose "rope_type" / "type" is
//                                                     "default" (plain rotary; every other type, and an
//                                                     object without a type, is refused)
//   token ids (bos, eos)                              integers >= 0 (and < vocab, checked by validate)
//   experts, experts per token, expert MLP widths, state-space sizes (state, inner width,
//     convolution, heads, head size, groups, chunk), layer periods and steps   integers >= 1
//   a shared expert's width, layer offsets            integers >= 0 (offsets below their period,
//                                                     checked by the loader)
//   expand (Mamba, Mamba-2, Jamba)                    finite and > 0
// A declared value is always in its positive domain: "0 = off / default" is how ModelConfig encodes an
// absent switch, never a value a file may give (a file's 0 window or 0 soft cap would mean something
// else to the tool that wrote it).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace qeval {

enum class ConfigField {
  vocab_size,
  d_model,
  d_ff,
  n_layers,
  n_heads,
  n_kv_heads,
  max_seq_len,
  head_size,
  rotary_dim,
  rotary_fraction,
  attention_window,  // a sliding window (one value for the windowed layers)
  window_pattern,    // Gemma-3: every n-th layer is global
  attention_windows, // qeval's per-layer list (entries >= 0: 0 = global)
  norm_eps,
  rope_theta,
  rope_theta_local,
  rope_scaling,
  attention_scale,
  query_pre_attn_scalar,
  attn_logit_softcap,
  final_logit_softcap,
  embedding_scale,
  bos_id,
  eos_id,
  // Mixture-of-experts and state-space layers (issue 51: their refusals name the file's key too).
  moe_experts,
  moe_top_k,
  moe_d_ff,
  moe_shared_d_ff,
  ssm_expand,
  ssm_d_inner,
  ssm_d_state,
  ssm_d_conv,
  ssm_heads,
  ssm_head_dim,
  ssm_groups,
  ssm_chunk,
  attn_layer_period,
  attn_layer_offset,
  expert_layer_period,
  expert_layer_offset,
  moe_layer_step,
  ssm_dt_rank,
};

// ModelConfig's (and qeval's config.json's) name of a field.
const char* field_name(ConfigField field);

class ConfigSource {
 public:
  // `file`: what refusals name; `describe_key`: how keys are quoted ("\"{}\"" for JSON files,
  // "metadata {}" for GGUF, "header field {}" for llama2.c).
  explicit ConfigSource(std::string file, std::string key_format = "\"{}\"");

  const std::string& file() const { return file_; }

  // `j[key]` as `field`: nullopt when absent or null; otherwise the JSON type and the field's domain
  // are checked (qeval::Error naming the file, the key and the value) and the key is remembered.
  std::optional<std::int64_t> integer(ConfigField field, const nlohmann::json& j, const std::string& key);
  std::optional<double> real(ConfigField field, const nlohmann::json& j, const std::string& key);
  // The same, required: a missing key is an error naming it.
  std::int64_t required_integer(ConfigField field, const nlohmann::json& j, const std::string& key);
  double required_real(ConfigField field, const nlohmann::json& j, const std::string& key);
  // A value the loader decoded itself (a GGUF float32, a llama2.c header word): the same checks.
  std::int64_t integer_value(ConfigField field, const std::string& key, const nlohmann::json& value);
  double real_value(ConfigField field, const std::string& key, const nlohmann::json& value);
  // rope scaling / rope parameters: null or plain ("default"); anything else is refused.
  void rope_scaling(const nlohmann::json& value, const std::string& key);

  // Names the key of a field the loader set without reading it through here (a family default
  // stated by another key, a value derived from one).
  void name(ConfigField field, std::string key);
  // The key of `field` as the file spells it (quoted as the file's kind does); the field's own
  // name when the loader named none.
  std::string key(ConfigField field) const;
  // The value the file gave for `field`, as JSON text; empty when the file gave none.
  std::string declared(ConfigField field) const;

 private:
  void remember(ConfigField field, const std::string& key, const nlohmann::json& value);
  std::string file_, key_format_;
  std::map<ConfigField, std::pair<std::string, std::string>> keys_;  // field → (key, value as JSON text)
};

}  // namespace qeval
