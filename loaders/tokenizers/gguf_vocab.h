// The tokenizer.ggml.* metadata of a GGUF file (llama.cpp's keys), read and validated before
// any tokenizer is built from it, and the cutting of user-defined tokens out of text that both
// GGUF tokenizer kinds share.
//
// Keys: tokenizer.ggml.model (string, required: "llama" or "gpt2"), .tokens (array of strings,
// required, at most 2^24), .scores (numbers, one per token), .token_type (integers, one per
// token), .merges (strings "left right", gpt2), .pre (string), .bos_token_id / .eos_token_id /
// .unknown_token_id (integers; -1 or 0xFFFFFFFF mean unset, as converters write them),
// .add_bos_token / .add_space_prefix (booleans). Every error names the file and the key.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qeval {

// llama.cpp's token types (tokenizer.ggml.token_type values, enum llama_token_type).
enum class GgufTokenType : std::int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct GgufVocab {
  std::string source;  // the file, named in errors
  std::string model;   // tokenizer.ggml.model
  std::string pre;     // tokenizer.ggml.pre; "" when absent
  // Raw bytes (byte-level symbols for gpt2, pieces with U+2581 for spaces for llama). An empty
  // token becomes "[EMPTY_<id>]", as llama.cpp renames it, so it can never match text.
  std::vector<std::string> tokens;
  std::vector<float> scores;         // empty when the key is absent; never NaN
  std::vector<GgufTokenType> types;  // kNormal for all when absent; values outside 0..6 read as kUndefined
  // tokenizer.ggml.merges in rank order, each split at its first space after the first byte (as
  // llama.cpp does); both symbols and their concatenation are tokens (checked).
  std::vector<std::pair<std::string, std::string>> merges;
  std::optional<std::int32_t> bos, eos, unk;  // in range (checked); nullopt when absent or unset
  std::optional<bool> add_bos, add_space_prefix;
};

// Reads and validates the keys above from GgufFile::metadata(). Throws qeval::Error naming
// `source` and the key (missing tokenizer, wrong type, array length, unknown merge symbol,
// duplicate token, id out of range, ...).
GgufVocab read_gguf_vocab(const nlohmann::json& metadata, const std::string& source);

// A piece of input text, or (token >= 0) a user-defined token found in it.
struct TextFragment {
  std::string_view text;
  std::int32_t token = -1;
};

// llama.cpp's tokenizer_st_partition with parse_special = false: the texts of the user-defined
// tokens (type 4) are cut out of the input, longest token first (equal lengths: lower id first),
// each at every occurrence from left to right; control and unknown tokens are not looked for,
// so "<s>" or "<|im_start|>" in a document stays plain text. (Hugging Face matches added tokens
// leftmost-longest instead; the two differ only where user-defined tokens overlap in the text.)
class UserDefinedTokens {
 public:
  explicit UserDefinedTokens(const GgufVocab& vocab);
  // Empty text gives no fragments.
  std::vector<TextFragment> split(std::string_view text) const;
  bool empty() const { return tokens_.empty(); }

 private:
  std::vector<std::pair<std::string, std::int32_t>> tokens_;  // longest first
};

}  // namespace qeval
