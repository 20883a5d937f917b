// What the format readers share (loaders/checkpoints/model_reader.h); not a public interface.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "loaders/checkpoints/model_reader.h"

namespace qeval {

class SafetensorsSet;

// Reads every part through `reader` (whose tensor sets are in header-only mode, or hold the
// weights already), validates them against the config (naming `source`) and fills `sizes`.
void measure_parts(ModelReader& reader, PartSizes& sizes, const std::string& source);

// ModelReader's protected row reader, for measure_parts.
at::Tensor read_token_embedding_block(ModelReader& reader, std::int64_t begin, std::int64_t count);

class ModelReaderAccess {
 public:
  static at::Tensor token_embedding_block(ModelReader& reader, std::int64_t begin, std::int64_t count) {
    return reader.token_embedding_block(begin, count);
  }
};

// The tensor table (ModelReader::tensors) and the files' sizes of a safetensors folder, from the
// headers its set has read: file by file, each file's tensors in the order of their data.
void list_safetensors(const SafetensorsSet& set, std::vector<TensorHeader>& tensors, std::uint64_t& bytes_on_disk);

// A resident reader (resident_reader) that also lists the tensors its weights were read from:
// a torch.save state dict is read whole at open, so its table comes from the dict itself.
std::unique_ptr<ModelReader> resident_reader(LoadedCheckpoint checkpoint, std::vector<TensorHeader> tensors,
                                             std::uint64_t bytes_on_disk);

// The format readers (one per file of loaders/checkpoints/).
std::unique_ptr<ModelReader> open_hf_checkpoint(const std::filesystem::path& dir);
std::unique_ptr<ModelReader> open_qeval_checkpoint(const std::filesystem::path& dir);
std::unique_ptr<ModelReader> open_gguf_checkpoint(const std::filesystem::path& file);
std::unique_ptr<ModelReader> open_llama2c_checkpoint(const std::filesystem::path& file);
// torch.save zip state dicts (torch_checkpoint.cpp): read whole at open, with their config.json beside them.
std::unique_ptr<ModelReader> open_torch_checkpoint(const std::filesystem::path& file);

}  // namespace qeval
