// Named tensors already in memory (a torch.save state dict), looked up the way the folder
// loaders look up safetensors files (SafetensorsSet), so the Hugging Face name mapping in
// loaders/checkpoints/hf_checkpoint.cpp serves both. Not a public interface beyond loaders/.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "loaders/checkpoints/checkpoint.h"

namespace qeval {

class TensorMap {
 public:
  // `source` names the file in errors.
  TensorMap(std::string source, std::map<std::string, at::Tensor> tensors)
      : source_(std::move(source)), tensors_(std::move(tensors)) {}

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // float32, contiguous, with the expected shape (errors name the file, the tensor, both shapes);
  // remembers the name as used.
  at::Tensor take(const std::string& name, const std::vector<std::int64_t>& shape);
  std::vector<std::string> unused() const;  // in name order
  const std::string& source() const { return source_; }
  const std::map<std::string, at::Tensor>& tensors() const { return tensors_; }

 private:
  std::string source_;
  std::map<std::string, at::Tensor> tensors_;
  std::set<std::string> used_;
};

// config.json in `config_dir` (Hugging Face GPT2LMHeadModel / LlamaForCausalLM) + tensors with
// HF names → a checkpoint, through the same mapping as load_hf_checkpoint. The caller sets
// path and weights_hash. Implemented in loaders/checkpoints/hf_checkpoint.cpp.
LoadedCheckpoint load_hf_tensors(const std::filesystem::path& config_dir, TensorMap& tensors);

}  // namespace qeval
