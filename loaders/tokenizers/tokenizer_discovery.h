// Finding the tokenizer that belongs to a checkpoint when --tokenizer is not given.
#pragma once

#include <filesystem>
#include <optional>

namespace qeval {

// A .gguf checkpoint with tokenizer.ggml.* metadata is its own tokenizer: the file itself is
// returned (load_tokenizer reads it). Otherwise looks in the checkpoint's folder (or the folder
// it is in) for, in order: tokenizer.json, vocab.json (+ merges.txt), encoder.json (+ vocab.bpe),
// tokenizer.model, a single other *.model, tokenizer.bin, a single tok*.bin. Returns nullopt
// when none or several candidates.
std::optional<std::filesystem::path> find_tokenizer_beside(const std::filesystem::path& checkpoint);

}  // namespace qeval
