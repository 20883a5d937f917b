// Independent oracles, run as Python scripts (tests/oracle/): Hugging Face `tokenizers` for the
// GPT-2 BPE, the pip `sentencepiece` package for .model files. Each encodes real text (all of
// WikiText-2 test by rows, C4 documents, hard strings); qeval must match id for id. Without
// python3 or the package the test is skipped with the reason (scripts/test installs both).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "loaders/tokenizers/gpt2_bpe.h"
#include "loaders/tokenizers/llama2c_tokenizer.h"
#include "loaders/tokenizers/sentencepiece_tokenizer.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// Hard strings as one more JSON-lines input for the oracles.
fs::path write_hard_strings(const test::TempDir& dir) {
  const std::vector<std::string> hard = {
      "Hello world",     "a  b   c    d",   "  leading",       "trailing   ",    "I'm don't they'll we've you'd",
      "DON'T 'S",        "2023 3.14 1e10 ١٢٣ ²³ ½",             "naïve café Zürich Ελληνικά русский 日本語 한국어",
      "👍🏽 🤗 emoji",   "line1\n\nline2\n\n\n", "tab\t\tx \u00a0 nbsp\u2003em", "<|endoftext|> literal",
      "e\xCC\x81 combining", "  ",              "\n",
  };
  const fs::path path = dir / "hard.jsonl";
  std::ofstream out(path);
  for (const auto& s : hard) out << nlohmann::json({{"text", s}}).dump() << "\n";
  return path;
}

void run_oracle(const std::string& command) {
  const std::string full = "python3 " + command + " 2>&1";
  const int rc = std::system(full.c_str());
  ASSERT_EQ(rc, 0) << "oracle failed: " << full;
}

TEST(TokenizerOracle, Gpt2MatchesHuggingFaceTokenizers) {
  if (!test::python_has("tokenizers")) {
    GTEST_SKIP() << "python3 with the Hugging Face 'tokenizers' package is not available "
                    "(pip install tokenizers): GPT-2 oracle comparison not run";
  }
  const fs::path gpt2 = test::data_path("tokenizers/gpt2");
  test::TempDir dir;
  const fs::path out = dir / "gpt2.jsonl";
  const fs::path tokenizer_json = dir / "tokenizer.json";
  ASSERT_NO_FATAL_FAILURE(run_oracle(
      quoted(test::oracle_script("hf_gpt2_oracle.py")) + " " + quoted(gpt2 / "encoder.json") + " " +
      quoted(gpt2 / "vocab.bpe") + " " + quoted(out) + " " +
      quoted(test::data_path("text/wikitext-2-raw-v1/test.rows.jsonl")) + ":100000 " +
      quoted(test::data_path("text/c4/c4-en-validation-excerpt-1025.jsonl")) + ":300 " +
      quoted(write_hard_strings(dir)) + ":100 --save-tokenizer-json " + quoted(tokenizer_json)));
  const auto records = test::read_oracle_output(out);
  ASSERT_GT(records.size(), 4358u + 300u);

  const auto files = Gpt2BpeTokenizer::from_vocab_and_merges(gpt2 / "encoder.json", gpt2 / "vocab.bpe");
  // The tokenizer.json that `tokenizers` itself wrote for the same vocabulary.
  const auto hf_json = Gpt2BpeTokenizer::from_tokenizer_json(tokenizer_json);
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    tokens += r.ids.size();
    ASSERT_TRUE(test::ids_equal(files->encode(r.text), r.ids, files.get()))
        << "record " << i << ": '" << r.text.substr(0, 200) << "'";
    ASSERT_TRUE(test::ids_equal(hf_json->encode(r.text), r.ids, files.get())) << "tokenizer.json, record " << i;
    ASSERT_EQ(files->decode(r.ids), r.text) << "record " << i;
  }
  EXPECT_GT(tokens, 300000u);
}

TEST(TokenizerOracle, SentencePieceMatchesPipSentencepiece) {
  if (!test::python_has("sentencepiece")) {
    GTEST_SKIP() << "python3 with the 'sentencepiece' package is not available (pip install sentencepiece): "
                    "SentencePiece oracle comparison not run";
  }
  test::TempDir dir;
  const fs::path hard = write_hard_strings(dir);
  struct Case {
    const char* model;
    const char* bin;  // the llama2.c export of the same vocabulary
    const char* text;
    int limit;
    bool normalises_spaces;  // remove_extra_whitespaces, which llama2.c's encoder lacks
  };
  for (const Case& c : {Case{"tokenizers/llama2/tokenizer.model", "tokenizers/llama2/tokenizer.bin",
                             "text/c4/c4-en-validation-excerpt-1025.jsonl", 300, false},
                        Case{"models/stories260K/tok512.model", "models/stories260K/tok512.bin",
                             "text/wikitext-2-raw-v1/test.rows.jsonl", 100000, true}}) {
    SCOPED_TRACE(c.model);
    const fs::path out = dir / "spm.jsonl";
    ASSERT_NO_FATAL_FAILURE(run_oracle(quoted(test::oracle_script("spm_oracle.py")) + " " +
                                       quoted(test::data_path(c.model)) + " " + quoted(out) + " " +
                                       quoted(test::data_path(c.text)) + ":" + std::to_string(c.limit) + " " +
                                       quoted(hard) + ":100"));
    const auto records = test::read_oracle_output(out);
    ASSERT_GT(records.size(), 300u);
    const auto spm = SentencePieceTokenizer::load(test::data_path(c.model));
    const auto bin = Llama2cTokenizer::load(test::data_path(c.bin));
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      ASSERT_TRUE(test::ids_equal(spm->encode(r.text), r.ids, spm.get()))
          << "libsentencepiece via the shim, record " << i << ": '" << r.text.substr(0, 200) << "'";
      const std::string bin_text = c.normalises_spaces ? test::normalise_spaces(r.text) : r.text;
      ASSERT_TRUE(test::ids_equal(bin->encode(bin_text), r.ids, spm.get()))
          << "llama2.c encoder, record " << i << ": '" << r.text.substr(0, 200) << "'";
    }
  }
}

}  // namespace
}  // namespace qeval
