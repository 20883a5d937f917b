// What the format readers share (loaders/checkpoints/model_reader.h); not a public interface.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "loaders/checkpoints/model_reader.h"

namespace qeval {

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

// The format readers (one per file of loaders/checkpoints/).
std::unique_ptr<ModelReader> open_hf_checkpoint(const std::filesystem::path& dir);
std::unique_ptr<ModelReader> open_qeval_checkpoint(const std::filesystem::path& dir);
std::unique_ptr<ModelReader> open_gguf_checkpoint(const std::filesystem::path& file);
std::unique_ptr<ModelReader> open_llama2c_checkpoint(const std::filesystem::path& file);

}  // namespace qeval
