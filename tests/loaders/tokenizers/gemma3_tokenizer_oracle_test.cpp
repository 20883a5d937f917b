// Gemma-3-270M's tokenizer (Q4_K_M GGUF from scripts/models --model gemma3-270m: a "llama"
// (SentencePiece-style) vocabulary of 262,144 tokens, add_space_prefix false, byte fallback, BOS
// added) against llama.cpp's own tokenizer, through llama-cpp-python with vocab_only
// (tests/oracle/llamacpp_tokenizer_oracle.py), on all of WikiText-2 test (by rows and as the
// one joined string), the C4 excerpt and stress strings: ids one for one, and decoding gives
// the text back. The oracle's python is $QEVAL_LLAMACPP_PYTHON (e.g. a venv with
// llama-cpp-python==0.3.36), else python3. Without the model or llama_cpp the tests are skipped.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/model_cache.h"
#include "loaders/tokenizers/tokenizer.h"
#include "loaders/tokenizers/tokenizer_discovery.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

fs::path gemma3_path() { return *model_handle_path("gemma3-270m"); }

// A shell word in single quotes (paths here have none).
std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

std::string llamacpp_python() {
  const char* env = std::getenv("QEVAL_LLAMACPP_PYTHON");
  return env != nullptr && *env != '\0' ? env : "python3";
}

// Empty when the test can run, else why not.
std::string why_not_runnable(const fs::path& model) {
  if (!fs::exists(model))
    return "Gemma-3-270M Q4_K_M GGUF not found at " + model.string() +
           " (scripts/models --model gemma3-270m downloads it; QEVAL_MODEL_DIR overrides the folder)";
  const std::string cmd = shell_quote(llamacpp_python()) + " -c 'import llama_cpp' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0)
    return llamacpp_python() +
           " cannot import llama_cpp (pip install llama-cpp-python==0.3.36 in a venv and point "
           "QEVAL_LLAMACPP_PYTHON at its python)";
  return {};
}

// Strings where an SPM without space prefix, with byte fallback and user-defined tokens could
// go wrong, as one more JSON-lines input.
fs::path write_stress_texts(const test::TempDir& dir) {
  const std::vector<std::string> stress = {
      "a  b   c    d\t\te",
      "  leading and trailing   ",
      "\n\n\n\nfour newlines, then\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\nsixteen",
      "   \n  \n\t \n",
      " ",
      "\n",
      "x",
      "<start_of_turn>user\nhi<end_of_turn>\n<bos><eos><pad><unk><mask> <start_of_image> [@BOS@]",
      "<table><tr><td>cell</td></tr></table> <h1>Title</h1> <strong>bold</strong> <br/>",
      "na\u00efve caf\u00e9 Z\u00fcrich \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 "
      "e\u0301 \u00c5ngstr\u00f6m \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0939\u093f\u0928\u094d\u0926\u0940",
      "\U0001F44D\U0001F3FD \U0001F917 emoji \U0001F468\u200D\U0001F469\u200D\U0001F467 flags \U0001F1EB\U0001F1F7 "
      "\U0001D11E \U000E0041",
      "rare bytes \x01\x02\x7f and U+2581 \u2581 itself \u2581\u2581 twice",
      "Pi is 3.14159265358979, 1234567890123 and 00000000000000000000000000000000",
      "def f(x):\n    return x**2  # comment\n\n\nint main() { return 0; }\n",
      "line1\r\nline2\r\n\r\nline3\r  \r\n\tindented\r\n",
      "I'm don't they'll we've you'd DON'T O'NEIL rock'n'roll",
      "https://example.com/path?q=1&r=2#frag user@example.org C:\\Windows\\System32",
  };
  const fs::path path = dir / "stress.jsonl";
  std::ofstream out(path);
  for (const auto& s : stress) out << nlohmann::json({{"text", s}}).dump() << "\n";
  return path;
}

// WikiText-2 test as the single string `"\n\n".join(rows)` (what the file protocols encode).
fs::path write_joined_wikitext(const test::TempDir& dir) {
  const fs::path path = dir / "joined.jsonl";
  std::ofstream out(path);
  out << nlohmann::json({{"text", read_file(test::data_path("text/wikitext-2-raw-v1/test.joined.txt"))}}).dump()
      << "\n";
  return path;
}

TEST(Gemma3TokenizerOracle, MatchesLlamaCppTokenForToken) {
  const fs::path model = gemma3_path();
  if (const std::string why = why_not_runnable(model); !why.empty())
    GTEST_SKIP() << why << ": llama.cpp tokenizer comparison not run";
  ASSERT_EQ(find_tokenizer_beside(model).value_or(""), model);
  const auto load_start = std::chrono::steady_clock::now();
  const auto tok = load_tokenizer(model);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  EXPECT_EQ(tok->kind(), "gguf-spm");
  EXPECT_EQ(tok->vocab_size(), 262144);
  EXPECT_EQ(tok->bos_id(), 2);  // <bos>
  EXPECT_EQ(tok->eos_id(), 1);  // <eos>
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_TRUE(tok->bos_per_window_by_default());  // tokenizer.ggml.add_bos_token = true
  std::printf("Gemma-3 GGUF tokenizer loaded in %.2f s\n", load_seconds);

  test::TempDir dir;
  const std::string wikitext = shell_quote(test::data_path("text/wikitext-2-raw-v1/test.rows.jsonl"));
  const std::string c4 = shell_quote(test::data_path("text/c4/c4-en-validation-excerpt-1025.jsonl"));
  struct Input {
    const char* name;
    std::string spec;
    std::size_t min_texts;
  };
  for (const Input& in : {Input{"WikiText-2 test rows", wikitext + ":100000", 2891},
                          Input{"WikiText-2 test joined", shell_quote(write_joined_wikitext(dir)) + ":1", 1},
                          Input{"C4 excerpt", c4 + ":100000", 1025},
                          Input{"stress strings", shell_quote(write_stress_texts(dir)) + ":1000", 17}}) {
    SCOPED_TRACE(in.name);
    const fs::path out = dir / "oracle.jsonl";
    const std::string command = shell_quote(llamacpp_python()) + " " +
                                shell_quote(test::oracle_script("llamacpp_tokenizer_oracle.py")) + " " + shell_quote(model) +
                                " " + shell_quote(out) + " " + in.spec + " 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << "oracle failed: " << command;
    const auto records = test::read_oracle_output(out);
    ASSERT_GE(records.size(), in.min_texts);
    std::size_t texts = 0, tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      const auto got = tok->encode(r.text);
      ASSERT_TRUE(test::ids_equal(got, r.ids, tok.get())) << "record " << i << ": '" << r.text.substr(0, 200) << "'";
      // U+2581 in the text decodes as a space (SentencePiece's own behaviour; spm_tokenizer.h).
      if (r.text.find("\xE2\x96\x81") == std::string::npos) {
        EXPECT_EQ(tok->decode(got), r.text) << "record " << i;
      }
      ++texts;
      tokens += r.ids.size();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("Gemma-3 GGUF tokenizer vs llama.cpp, %s: %zu texts, %zu tokens identical (qeval %.2f s)\n", in.name,
                texts, tokens, seconds);
  }
}

}  // namespace
}  // namespace qeval
