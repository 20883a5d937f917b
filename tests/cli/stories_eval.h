// The eval command the CLI tests run on the default model (stories260K) and data. The tokenizer
// is named explicitly as the model's llama2.c export, tok512.bin: discovery would pick
// tok512.model, which SentencePiece cannot load in the AddressSanitizer build (its shim needs
// RTLD_DEEPBIND; docs/hardening.md), and these tests are about the CLI, not the tokenizer.
#pragma once

#include <string>

namespace qeval::test {

inline const std::string kStoriesTokenizer = "models/stories260K/tok512.bin";
inline const std::string kEval = "eval -q --tokenizer " + kStoriesTokenizer;

}  // namespace qeval::test
