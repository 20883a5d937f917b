// SentencePiece .model files, encoded and decoded by libsentencepiece itself. The library is
// reached only through libqeval_spm_shim.so (loaders/tokenizers/spm_shim/spm_shim.h explains why), which is
// loaded on first use from, in order: $QEVAL_SPM_SHIM, the path the build compiled in, and
// libqeval_spm_shim.so beside the running executable.
//
// encode() = SentencePieceProcessor::Encode (the model's normaliser and dummy prefix included,
// no BOS/EOS); decode() = Decode (drops control tokens such as BOS/EOS and the dummy-prefix
// space; byte pieces that do not form valid UTF-8 come back as U+FFFD).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "loaders/tokenizers/tokenizer.h"

namespace qeval {

struct SpmShim;  // the resolved C ABI

class SentencePieceTokenizer final : public Tokenizer {
 public:
  static std::unique_ptr<SentencePieceTokenizer> load(const std::filesystem::path& path);
  ~SentencePieceTokenizer() override;

  std::vector<std::int32_t> encode(std::string_view text) const override;
  // cut_before_space, when no piece holds a non-space followed by a space and the model's
  // normaliser was found, on probe texts at load, to encode a continuation exactly either with
  // the space the cut leaves in front ("keep") or without it ("drop": the dummy prefix stands in
  // for it). The normaliser is libsentencepiece's own and not visible through the shim, so this is
  // decided by trying; a model for which neither works encodes every document whole.
  std::size_t continuation_cut(std::string_view text, std::size_t limit) const override;
  std::vector<std::int32_t> encode_continuation(std::string_view text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::optional<std::int32_t> bos_id() const override { return bos_; }
  std::optional<std::int32_t> eos_id() const override { return eos_; }
  std::optional<std::int32_t> document_separator() const override { return bos_; }
  std::string kind() const override { return "sentencepiece"; }

  // Where the shim was loaded from (for `qeval inspect` and error reports).
  static std::string shim_path();

 private:
  SentencePieceTokenizer() = default;

  const SpmShim* shim_ = nullptr;
  void* handle_ = nullptr;  // qeval_spm*
  std::string source_;
  std::int64_t vocab_size_ = 0;
  std::optional<std::int32_t> bos_, eos_;
  enum class Continuation { none, keep_space, drop_space };
  Continuation continuation_ = Continuation::none;
  void choose_continuation();
};

}  // namespace qeval
