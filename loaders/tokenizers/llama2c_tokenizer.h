// llama2.c tokenizer.bin: int32 max_token_length, then per token: float32 score, int32 length,
// `length` bytes (little-endian). The file does not store the token count: it is read to EOF.
//
// encode() follows llama2.c run.c encode() exactly (bos = eos = 0): a " " token first when the
// text is non-empty (SentencePiece's dummy prefix), the text split into UTF-8 characters (a
// lead byte plus up to 3 continuation bytes), a character missing from the vocabulary becomes
// its bytes as ids byte + 3 (<0xNN> byte fallback), then the adjacent pair whose concatenation
// is a vocabulary entry with the highest score is merged, leftmost on ties, until none is left.
// Two deliberate differences from the C code, neither reachable with its own inputs: a NUL byte
// is an ordinary byte (C strings stop there), and when two entries spell the same string the
// lowest id wins (C's bsearch returns either).
// Like run.c there is no normaliser: a SentencePiece model trained with remove_extra_whitespaces
// (tok512.model is; Llama-2's is not) drops leading/trailing spaces and collapses space runs
// before encoding, so its .bin export agrees with it only on text without such spaces.
// decode() follows run.c decode(): a piece after BOS (id 1) loses its leading space, and
// "<0xNN>" pieces become the raw byte. BOS and EOS themselves decode to nothing: llama2.c
// never prints them (generation stops at BOS), and SentencePiece drops control tokens too.
// So decode(encode(t)) == " " + t: the dummy prefix stays (decode(BOS + encode(t)) == t).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "loaders/tokenizers/tokenizer.h"

namespace qeval {

class Llama2cTokenizer final : public Tokenizer {
 public:
  static std::unique_ptr<Llama2cTokenizer> load(const std::filesystem::path& path);

  std::vector<std::int32_t> encode(std::string_view text) const override;
  // Cut before a space that follows a non-space (cut_before_space), when no piece of the
  // vocabulary holds a non-space followed by a space; the continuation has no dummy prefix.
  std::size_t continuation_cut(std::string_view text, std::size_t limit) const override;
  std::vector<std::int32_t> encode_continuation(std::string_view text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(pieces_.size()); }
  // llama2.c hard-codes BOS = 1 and EOS = 2.
  std::optional<std::int32_t> bos_id() const override { return 1; }
  std::optional<std::int32_t> eos_id() const override { return 2; }
  std::optional<std::int32_t> document_separator() const override { return 1; }
  std::string kind() const override { return "llama2c"; }

  const std::string& piece(std::int32_t id) const { return pieces_.at(id); }
  float score(std::int32_t id) const { return scores_.at(id); }
  std::int32_t max_token_length() const { return max_token_length_; }

 private:
  std::optional<std::int32_t> lookup(std::string_view s) const;
  std::vector<std::int32_t> encode_text(std::string_view text, bool dummy_prefix) const;

  std::string source_;
  std::int32_t max_token_length_ = 0;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, std::int32_t> ids_;  // lowest id per string
  std::int32_t space_id_ = -1;                         // the dummy prefix " ", if present
  bool cuttable_ = false;                              // no piece spans "x " (continuation_cut)
};

}  // namespace qeval
