// The tokenizer inside a GGUF file (tokenizer.ggml.* metadata, gguf_vocab.h), so that
// `qeval eval --model X.gguf` needs no tokenizer file. Ids are those llama.cpp's perplexity tool
// gets (llama_tokenize with parse_special = false), and for byte-level BPE those of Hugging Face
// `tokenizers` built from the same vocabulary, merges and pre-tokenizer.
//
// tokenizer.ggml.model = "gpt2": byte-level BPE (gpt2_bpe.h) over tokenizer.ggml.tokens and
//   .merges, cut first by the pre-tokenizer tokenizer.ggml.pre names (bpe_pretokenizers.h):
//     "default", "gpt-2", "gpt2"         GPT-2's regex
//     "smollm"                           single \p{N} characters, then GPT-2's regex
//     "llama-bpe", "llama3", "llama-v3"  Llama 3's regex; a piece that is a whole token is kept
//                                        (ignore_merges); add_bos_token defaults to true
//     "qwen2"                            Llama 3's regex with single digits
//   An absent .pre reads as "default" (llama.cpp does the same, with a warning). Caution:
//   for "default" llama.cpp itself splits differently (an ad-hoc regex list of its own that it
//   warns degrades quality); qeval uses GPT-2's regex, the common choice of such vocabularies.
//   Any other name is refused with the list above. tokenizer.ggml.add_space_prefix is ignored
//   for "gpt2", as llama.cpp's BPE path ignores it.
//   A byte whose symbol the vocabulary lacks (SmolLM2's has none for 21 bytes, such as 0x04)
//   encodes to nothing: Hugging Face drops it before merging (qeval too), llama.cpp after, so the
//   two differ only when such a byte sits between two symbols that would merge.
//   kind() "gpt2-bpe"; document_separator() is <|endoftext|> when the vocabulary has it, else EOS.
// tokenizer.ggml.model = "llama": llama.cpp's SentencePiece-style tokenizer (spm_tokenizer.h),
//   kind() "gguf-spm", document_separator() BOS.
//
// Special tokens in the text. Documents are plain text, as in llama.cpp's perplexity tool
// (parse_special = false): the text of a control token ("<|im_start|>", "<s>") or of the unknown
// token is encoded as ordinary characters, never as that token. User-defined tokens (type 4) are
// cut out of the text and kept whole, as llama.cpp does even with parse_special = false (and as
// Hugging Face does for added tokens that are not special). encode() adds no BOS/EOS;
// bos_id()/eos_id() are tokenizer.ggml.bos_token_id/eos_token_id and adds_bos() is
// tokenizer.ggml.add_bos_token (or the default above). bos_per_window_by_default() is true only when
// tokenizer.ggml.add_bos_token is present and true (Gemma-3, Llama 3): windows then open with BOS.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "loaders/tokenizers/tokenizer.h"

namespace qeval {

// Opens the GGUF file (header and metadata only) and builds its tokenizer. Throws qeval::Error
// naming the file and the key when the tokenizer is missing, unsupported or malformed.
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::filesystem::path& path);

// The same from metadata already read (GgufFile::metadata()); `source` names the file in errors.
std::unique_ptr<Tokenizer> gguf_tokenizer_from_metadata(const nlohmann::json& metadata, const std::string& source);

// Whether a readable GGUF file at `path` has tokenizer.ggml.model (false for other files).
bool gguf_has_tokenizer(const std::filesystem::path& path);

}  // namespace qeval
