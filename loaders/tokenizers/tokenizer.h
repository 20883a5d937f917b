// Tokenizer: text <-> token ids. Encoding equals the reference tokenizer token for token
// (GPT-2 byte-level BPE, SentencePiece via libsentencepiece, llama2.c tokenizer.bin, and the
// tokenizers embedded in GGUF files, as llama.cpp runs them: gguf_tokenizer.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qeval {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Ids of `text` with no BOS/EOS added. SentencePiece-style tokenizers add their dummy
  // prefix (a leading space) as the reference does.
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;
  virtual std::int64_t vocab_size() const = 0;
  virtual std::optional<std::int32_t> bos_id() const = 0;
  virtual std::optional<std::int32_t> eos_id() const = 0;
  // The token that separates documents when a protocol joins them: GPT-2 <|endoftext|>,
  // BOS for Llama-style tokenizers (llama2.c trains on BOS + story).
  virtual std::optional<std::int32_t> document_separator() const = 0;
  // Whether the reference tokenizer puts BOS before a text it encodes for the model (GPT-2: no;
  // SentencePiece and llama2.c: yes; GGUF: tokenizer.ggml.add_bos_token, or llama.cpp's default
  // for the vocabulary). encode() never adds it; a protocol with bos "auto" can follow this.
  virtual bool adds_bos() const { return bos_id().has_value(); }
  // Whether protocol `windows` opens every window with BOS when not told (bos_per_window
  // "auto"): true only for GGUF tokenizers whose tokenizer.ggml.add_bos_token is present and
  // true, as llama.cpp's perplexity tool and lm-eval put BOS before every scored sequence of such
  // a model (Gemma-3 was trained with BOS at position 0 of every sequence). Every other
  // tokenizer keeps the convention of joined documents without BOS per window.
  virtual bool bos_per_window_by_default() const { return false; }
  // "gpt2-bpe" (also byte-level BPE from GGUF), "sentencepiece", "llama2c", "gguf-spm"
  virtual std::string kind() const = 0;
};

// Detects the format: a folder (tokenizer.json, or vocab.json+merges.txt, or encoder.json+
// vocab.bpe, or tokenizer.model), encoder.json / vocab.json (merges beside it), *.model
// (SentencePiece), *.bin (llama2.c), *.gguf (the tokenizer in its tokenizer.ggml.* metadata).
// Throws naming the file and what was expected.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);

}  // namespace qeval
