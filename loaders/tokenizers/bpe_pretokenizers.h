// The pre-tokenizers of byte-level BPE vocabularies: how text is cut into pieces before BPE runs
// inside each piece. GGUF names them in tokenizer.ggml.pre; the regexes are those of the Hugging
// Face tokenizer.json files and of llama.cpp's llama-vocab.cpp for the same names.
//
//   kGpt2    GPT-2's regex (gpt2_pretokenize.h)
//              's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kSmollm  every \p{N} character a piece of its own, then GPT-2's regex on the text between
//            (HF: Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)];
//            llama.cpp LLAMA_VOCAB_PRE_TYPE_SMOLLM: "\p{N}" then the GPT-2 regex)
//   kLlama3  Llama 3's regex
//              (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//              ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   kQwen2   the same with \p{N} in place of \p{N}{1,3} (single digits)
//
// Hand-written scanners that take the alternatives in order with the regex engines' backtracking
// results, over the Unicode classes of gpt2_unicode.h. (?i:...) folds case as the Hugging Face
// (Onig) and tiktoken engines do: 's also matches 'S and 'ſ (U+017F, whose case fold is s; the
// only non-ASCII letter that folds onto one of s t r e v m l d). llama.cpp's rewrite of the
// Llama 3 regex ('[sS]...) does not match 'ſ; qeval follows the original tokenizers.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace qeval {

enum class BpePretokenizer : std::uint8_t { kGpt2, kSmollm, kLlama3, kQwen2 };

// "gpt2", "smollm", "llama3", "qwen2": for messages and records.
std::string_view bpe_pretokenizer_name(BpePretokenizer p);

// The pieces, in order; their concatenation is `text`. Invalid UTF-8 bytes count as "other"
// characters (neither letter, number nor space), as in gpt2_pretokenize.
std::vector<std::string_view> bpe_pretokenize(BpePretokenizer p, std::string_view text);

}  // namespace qeval
