// The eval command the CLI tests run on the default model (stories260K) and data. The tokenizer
// is named explicitly as the model's llama2.c export, tok512.bin: discovery would pick
// tok512.model, which SentencePiece cannot load in the AddressSanitizer build (its shim needs
// RTLD_DEEPBIND; docs/hardening.md), and these tests are about the CLI, not the tokenizer.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

#include "tests/cli/run_qeval.h"
#include "tests/support/test_data.h"

namespace qeval::test {

inline const std::string kStoriesTokenizer = "models/stories260K/tok512.bin";
inline const std::string kEval = "eval -q --tokenizer " + kStoriesTokenizer;

// `qeval eval ARGS` on the default model and data, its record written to DIR/NAME.json and read
// back; a non-zero exit fails the test (with qeval's output) and gives null.
inline nlohmann::json stories_eval_record(const TempDir& dir, const std::string& name, const std::string& args) {
  const std::string out = (dir / (name + ".json")).string();
  const CommandResult r = run_qeval(kEval + " --data-dir " + data_dir().string() + " " + args + " --out " + out);
  EXPECT_EQ(r.status, 0) << r.output;
  std::ifstream in(out);
  return in ? nlohmann::json::parse(in) : nlohmann::json();
}

}  // namespace qeval::test
