// llama.cpp's SentencePiece-style tokenizer (llm_tokenizer_spm) for GGUF vocabularies with
// tokenizer.ggml.model = "llama": pieces, scores and token types, no libsentencepiece.
//
// encode(text), as llama_tokenize(add_special = false, parse_special = false):
//   - user-defined tokens are cut out first (gguf_vocab.h UserDefinedTokens);
//   - each text fragment gets a " " in front when add_space_prefix (default true) and it opens
//     the text or follows a user-defined token, then every " " becomes U+2581;
//   - the fragment is split into UTF-8 characters (the lead byte gives the length), and the
//     adjacent pair whose concatenation is a token with the highest score is merged, leftmost
//     on equal scores, until no pair is a token (any token counts, as in llama.cpp);
//   - a final symbol that is not a token becomes its bytes as <0xNN> tokens (byte fallback),
//     or the single-byte token, or <unk> for the whole symbol when neither exists.
//   No normaliser runs: tokenizer.ggml.remove_extra_whitespaces is not applied (llama.cpp's SPM
//   path ignores it too), so a model trained with it (tok512.model) agrees with libsentencepiece
//   only on text without leading, trailing or repeated spaces.
// decode: normal tokens with U+2581 read as " ", byte tokens as their byte, user-defined tokens
//   as their text, control / unknown / unused / undefined tokens as nothing (llama.cpp's
//   token_to_piece without `special`); with add_space_prefix the first piece's leading space
//   is dropped (SentencePiece's dummy prefix). So decode(encode(t)) == t for text without
//   user-defined tokens and without U+2581.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loaders/tokenizers/gguf_vocab.h"
#include "loaders/tokenizers/tokenizer.h"

namespace qeval {

class GgufSpmTokenizer final : public Tokenizer {
 public:
  // Needs tokenizer.ggml.scores. BOS/EOS/<unk> default to 1/2/0 when their keys are absent
  // (llama.cpp's defaults for this model), add_bos_token to true.
  explicit GgufSpmTokenizer(GgufVocab vocab);
  GgufSpmTokenizer(const GgufSpmTokenizer&) = delete;
  GgufSpmTokenizer& operator=(const GgufSpmTokenizer&) = delete;

  std::vector<std::int32_t> encode(std::string_view text) const override;
  // cut_before_space, when the vocabulary has no user-defined tokens and no token holds a
  // non-space followed by U+2581; the continuation gets no space prefix.
  std::size_t continuation_cut(std::string_view text, std::size_t limit) const override;
  std::vector<std::int32_t> encode_continuation(std::string_view text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(tokens_.size()); }
  std::optional<std::int32_t> bos_id() const override { return bos_; }
  std::optional<std::int32_t> eos_id() const override { return eos_; }
  // BOS, as for the other Llama-style tokenizers (llama2.c trains on BOS + story).
  std::optional<std::int32_t> document_separator() const override { return bos_; }
  bool adds_bos() const override { return add_bos_; }
  bool bos_per_window_by_default() const override { return add_bos_key_; }
  std::string kind() const override { return "gguf-spm"; }

 private:
  // One fragment, spaces already U+2581 (llm_tokenizer_spm_session::tokenize).
  void encode_fragment(std::string_view text, std::vector<std::int32_t>& out) const;
  std::vector<std::int32_t> encode_text(std::string_view text, bool space_prefix) const;
  std::int32_t find(std::string_view piece) const;  // -1 when not a token

  UserDefinedTokens user_defined_;  // first: built from the vocabulary before it moves in
  std::string source_;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<GgufTokenType> types_;
  std::unordered_map<std::string_view, std::int32_t> ids_;  // views into tokens_
  std::array<std::int32_t, 256> byte_ids_{};                // -1: no token for the byte
  std::optional<std::int32_t> bos_, eos_, unk_;
  bool add_bos_ = true;
  bool add_bos_key_ = false;  // tokenizer.ggml.add_bos_token present and true
  bool add_space_prefix_ = true;
  bool cuttable_ = false;  // continuation_cut's conditions hold
};

}  // namespace qeval
