// A GGUF file's model config: its metadata (and the embedding's shape from the tensor table)
// mapped onto ModelConfig, through the one validator (model/config_validation.h). Headers only:
// no tensor data is read, so `qeval inspect` can describe a 70B file in milliseconds.
#pragma once

#include <nlohmann/json.hpp>

#include "loaders/checkpoints/gguf.h"
#include "model/config.h"

namespace qeval {

// Supported architectures: llama, qwen2, qwen3, gemma3, qwen2moe, qwen3moe (their experts are added by
// gguf_checkpoint.cpp, which also reads mamba, mamba2 and jamba; it says how each maps).
// Throws qeval::Error naming the file, the metadata key and its value.
ModelConfig gguf_model_config(const GgufFile& file);

}  // namespace qeval
