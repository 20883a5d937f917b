// GPT-2 byte-level BPE (OpenAI encoder.py / Hugging Face ByteLevel + BPE).
//
// encode: the text is cut by GPT-2's regex (gpt2_pretokenize.h; other byte-level vocabularies
// name another pre-tokenizer, bpe_pretokenizers.h), each piece's bytes become the
// 256 byte symbols ("Ġ" for a space: the bytes_to_unicode table), and within a piece the
// adjacent pair with the lowest merge rank is merged, leftmost first, until no pair has a rank.
// decode: each id's symbol string maps back through the byte table, exactly.
// Special tokens such as <|endoftext|> are never produced from text: a literal
// "<|endoftext|>" in the data is encoded as ordinary characters (as OpenAI's encoder and
// tiktoken's encode_ordinary do); protocols insert the separator id themselves.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loaders/tokenizers/bpe_pretokenizers.h"
#include "loaders/tokenizers/tokenizer.h"

namespace qeval {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  struct Spec {
    std::string source;  // file(s) named in errors
    std::vector<std::pair<std::string, std::int32_t>> vocab;   // symbol string -> id
    std::vector<std::pair<std::string, std::string>> merges;   // in rank order
    std::vector<std::pair<std::string, std::int32_t>> added;   // tokenizer.json added_tokens
    bool add_prefix_space = false;  // HF ByteLevel option: " " before text not starting with one
    bool ignore_merges = false;     // HF BPE option: a piece that is a whole vocab entry is kept
    BpePretokenizer pretokenizer = BpePretokenizer::kGpt2;  // how text is cut before BPE
    // Byte symbols may be missing from the vocabulary (SmolLM2's lacks 21, such as 0x04); such
    // bytes are dropped from a piece before merging, as Hugging Face's BPE without an unknown
    // token skips characters it has no id for. Off: all 256 are required.
    bool drop_missing_bytes = false;
  };

  // encoder.json + vocab.bpe (OpenAI names) or vocab.json + merges.txt (HF names).
  static std::unique_ptr<Gpt2BpeTokenizer> from_vocab_and_merges(const std::filesystem::path& vocab_json,
                                                                 const std::filesystem::path& merges_txt);
  // A Hugging Face tokenizer.json whose model is BPE with the ByteLevel pre-tokenizer.
  static std::unique_ptr<Gpt2BpeTokenizer> from_tokenizer_json(const std::filesystem::path& path);

  explicit Gpt2BpeTokenizer(Spec spec);

  std::vector<std::int32_t> encode(std::string_view text) const override;
  // Cut at the start of a pre-tokenizer piece whose previous byte is printable ASCII (not
  // whitespace), at least 64 bytes inside the text: BPE never merges across pieces, and the
  // pre-tokenizers' matches look at most a few characters past their end except over whitespace
  // runs, which such a cut never follows. The continuation gets no prefix space.
  std::size_t continuation_cut(std::string_view text, std::size_t limit) const override;
  std::vector<std::int32_t> encode_continuation(std::string_view text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(id_bytes_.size()); }
  std::optional<std::int32_t> bos_id() const override { return end_of_text_; }
  std::optional<std::int32_t> eos_id() const override { return end_of_text_; }
  std::optional<std::int32_t> document_separator() const override { return end_of_text_; }
  bool adds_bos() const override { return false; }
  std::string kind() const override { return "gpt2-bpe"; }

  // The id of a symbol string as the vocabulary spells it (e.g. "Ġworld"), if present.
  std::optional<std::int32_t> token_id(const std::string& symbol) const;
  std::size_t merge_count() const { return pair_merges_.size(); }

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t id;  // id of the merged symbol
  };
  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  void bpe(std::string_view piece, std::vector<std::int32_t>& out) const;

  std::string source_;
  std::unordered_map<std::string, std::int32_t> vocab_;
  std::unordered_map<std::uint64_t, Merge> pair_merges_;
  std::array<std::int32_t, 256> byte_ids_{};  // id of each single-byte symbol (-1: dropped)
  std::vector<std::string> id_bytes_;         // raw bytes of each id ("" for holes)
  std::vector<bool> id_present_;
  std::optional<std::int32_t> end_of_text_;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  BpePretokenizer pretokenizer_ = BpePretokenizer::kGpt2;
  bool drop_missing_bytes_ = false;
};

// The bytes_to_unicode table of GPT-2's encoder.py: byte b is written as this code point.
char32_t gpt2_byte_to_unicode(std::uint8_t b);

}  // namespace qeval
