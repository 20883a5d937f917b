// GPT-2's pre-tokenisation: the text is cut into pieces by the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (OpenAI encoder.py, Hugging Face ByteLevel pre-tokenizer), and BPE runs inside each piece.
// Implemented as a hand-written scanner that takes the regex's alternatives in order, with
// the same backtracking result for \s+(?!\S): a whitespace run followed by a non-space keeps
// its last character for the next piece (where " ?\p{L}+" etc. may absorb a space).
#pragma once

#include <string_view>
#include <vector>

namespace qeval {

// The pieces, in order; their concatenation is `text`. Invalid UTF-8 bytes count as
// "other" characters (the reference tokenizers only accept valid Unicode strings).
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace qeval
