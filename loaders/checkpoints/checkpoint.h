// Checkpoint loading: every supported format mapped onto one ModelConfig + ModelWeights
// (DESIGN.md §3). load_checkpoint() detects the format; each format also has its own loader.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace qeval {

struct LoadedCheckpoint {
  ModelConfig config;
  ModelWeights weights;          // float32, contiguous, validated against config
  std::string format;            // "hf-gpt2", "hf-llama", "hf-qwen3", ... (hf_config.cpp), "llama2c", "gguf", "qeval"
  std::filesystem::path path;    // what was loaded (file or folder)
  std::string weights_hash;      // 16 hex digits, defined in loaders/checkpoints/weights_hash.h (per-tensor XXH3, combined by name)
  nlohmann::json notes = nlohmann::json::object();  // format-specific facts worth recording
};

// Detects the format from what `path` is and holds:
//   folder with config.json: Hugging Face GPT-2, Llama, Qwen2/3, Mistral, Gemma-3, Phi-3, GPT-NeoX, OPT (model.safetensors
//     or sharded with model.safetensors.index.json) or qeval's own ({"format": "qeval"});
//   *.bin with a llama2.c v0 header; *.gguf.
// Throws qeval::Error naming the file, what was expected and what was found.
LoadedCheckpoint load_checkpoint(const std::filesystem::path& path);

LoadedCheckpoint load_hf_checkpoint(const std::filesystem::path& dir);       // hf_config.h lists the architectures
LoadedCheckpoint load_qeval_checkpoint(const std::filesystem::path& dir);    // config.json + model.safetensors
LoadedCheckpoint load_llama2c_checkpoint(const std::filesystem::path& file);
LoadedCheckpoint load_gguf_checkpoint(const std::filesystem::path& file);

}  // namespace qeval
