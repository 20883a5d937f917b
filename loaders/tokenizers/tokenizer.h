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

  // Incremental encoding. Protocols encode a long document piece by piece, so that one window
  // costs the memory of a piece, not of the document (a 20 MB paragraph took 3.4 GB encoded whole).
  // continuation_cut: a byte offset `cut` in (0, limit] such that
  //   encode(text) == encode(text[0, cut)) ++ encode_continuation(text[cut, end))
  // exactly, as far into the text as it finds one; 0 when this tokenizer knows no exact cut there
  // (the default: such a tokenizer is cut at a character boundary by the caller, which says so).
  virtual std::size_t continuation_cut(std::string_view text, std::size_t limit) const { return 0; }
  // The ids of text that continues a text after such a cut: no dummy prefix, no prefix space.
  virtual std::vector<std::int32_t> encode_continuation(std::string_view text) const { return encode(text); }
};

// The exact cut of the SentencePiece family (llama2.c, libsentencepiece, llama.cpp's SPM): before
// a space that follows a non-space, the last one at or before `limit` (0: none). Exact when no
// vocabulary piece holds a non-space followed by a space (so no merge can span the cut) and the
// continuation is encoded without the dummy prefix.
std::size_t cut_before_space(std::string_view text, std::size_t limit);

// Detects the format: a folder (tokenizer.json, or vocab.json+merges.txt, or encoder.json+
// vocab.bpe, or tokenizer.model), encoder.json / vocab.json (merges beside it), *.model
// (SentencePiece), *.bin (llama2.c), *.gguf (the tokenizer in its tokenizer.ggml.* metadata).
// Throws naming the file and what was expected.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path);

}  // namespace qeval
