// What a checkpoint holds, read from its headers only: the config (through the one validator)
// and every tensor's name, dtype and shape, without reading a byte of tensor data. `qeval
// inspect` describes a 70B checkpoint with this in well under a second and a few megabytes (the
// full loader would read 140 GB into memory).
//
// Per format: Hugging Face and qeval folders: config.json + the safetensors headers (index and
// shards); GGUF: the metadata and the tensor table; llama2.c: the 28-byte header (the tensors are
// implied by it and listed as such); torch.save archives: config.json only (their tensor shapes
// live in the pickle, which is not read here).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"

namespace qeval {

struct TensorHeader {
  std::string name;
  std::string dtype;  // as the file names it: "F16", "BF16", "Q4_K", "F32"
  std::vector<std::int64_t> shape;
  std::string file;  // the file it is in (shards), its name only
};

struct CheckpointHeader {
  std::string format;  // as LoadedCheckpoint::format
  ModelConfig config;
  std::vector<TensorHeader> tensors;  // empty when the format's headers do not list them
  std::uint64_t bytes = 0;            // the weight files' sizes on disk
  nlohmann::json notes = nlohmann::json::object();
};

// Throws qeval::Error naming the file, like load_checkpoint, for anything its headers already show.
CheckpointHeader read_checkpoint_header(const std::filesystem::path& path);

}  // namespace qeval
