// Hugging Face config.json → ModelConfig, one reader per supported architecture (not a public
// interface: hf_checkpoint.cpp maps the weights). Each reader follows the family's
// configuration_<family>.py defaults for keys a config.json may leave out, and refuses what
// qeval does not implement (rope_scaling, OPT's project_in/out, ...) with the key and its value.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

namespace qeval {

enum class HfFamily { gpt2, llama, qwen2, qwen3, mistral, gemma3, phi3, gpt_neox, opt, mixtral, qwen2_moe, qwen3_moe, mamba, mamba2, jamba };

struct HfModel {
  HfFamily family = HfFamily::llama;
  std::string architecture;  // the HF class name, e.g. "Qwen3ForCausalLM"
  std::string format;        // LoadedCheckpoint::format: "hf-gpt2", "hf-llama", "hf-qwen3", ...
  ModelConfig config;
  // Gemma stores RMSNorm gains w and applies (1 + w): the loader adds the 1 (ModelWeights holds
  // the factors applied), so the forward and the transforms see plain gains.
  bool norm_plus_one = false;
  // Where the decoder's tensors live: "model." (…ForCausalLM), "model.language_model." or
  // "language_model.model." (Gemma3ForConditionalGeneration's text part).
  std::string prefix = "model.";  // "backbone." for Mamba and Mamba-2
  std::string lm_head = "lm_head.weight";
  std::string embedding;  // the token embedding's name when it is not the family's usual one
};

// `j` is config.json's object; `file` names it in errors; facts worth recording go to `notes`.
// Gemma3ForConditionalGeneration reads its "text_config".
HfModel read_hf_model_config(const nlohmann::json& j, const std::string& file, nlohmann::json& notes);

// "GPT2LMHeadModel (model_type gpt2), ..." for messages.
const char* hf_supported_architectures();

}  // namespace qeval
