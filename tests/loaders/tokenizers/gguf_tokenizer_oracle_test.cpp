// The real model's tokenizer: SmolLM2-135M-Instruct's Q4_1 GGUF ("gpt2" vocabulary, pre
// "smollm") against Hugging Face `tokenizers` built by tests/oracle/hf_gguf_tokenizer_oracle.py
// from the same file's tokens and merges (read with the `gguf` pip package) and SmolLM2's
// pre-tokenizer, on all of WikiText-2 test (by rows and as the one joined string), the C4 excerpt
// and stress strings; then the same vocabulary with the Llama 3 and Qwen2 pre-tokenizers. Ids
// must match one for one and decoding must give the text back. The four pre-tokenizers are also
// compared piece for piece with `tokenizers`' own on the same texts. Without the model
// (scripts/models downloads it) or python3 with `tokenizers` and `gguf` the tests are skipped.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/model_cache.h"
#include "loaders/checkpoints/gguf.h"
#include "loaders/tokenizers/bpe_pretokenizers.h"
#include "loaders/tokenizers/gguf_tokenizer.h"
#include "loaders/tokenizers/tokenizer_discovery.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

// ${QEVAL_MODEL_DIR:-~/.cache/qeval/models}/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/models)
fs::path smollm2_path() { return *model_handle_path("smollm2-135m"); }

// Empty when the test can run, else why not.
std::string why_not_runnable(const fs::path& model) {
  if (!fs::exists(model)) {
    return "SmolLM2-135M-Instruct Q4_1 GGUF not found at " + model.string() +
           " (scripts/models downloads it; QEVAL_MODEL_DIR overrides the folder)";
  }
  if (!test::python_has("tokenizers") || !test::python_has("gguf")) {
    return "python3 with the 'tokenizers' and 'gguf' packages is not available (pip install tokenizers gguf)";
  }
  return {};
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// Strings where pre-tokenizers and BPE could disagree, as one more JSON-lines input.
fs::path write_stress_texts(const test::TempDir& dir) {
  const std::vector<std::string> stress = {
      "Pi is 3.14159265358979, 1234567890123 and \u0661\u0662\u0663\u0664\u0665 (Arabic-Indic), \u00b2\u00b3 \u00bd "
      "\u2154 \u216b",
      "00000000000000000000000000000000000000000000000000 x1.5e-10y abc123def 456ghi 2024-01-31T12:00:00Z",
      "na\u00efve caf\u00e9 Z\u00fcrich \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0440\u0443\u0441\u0441\u043a"
      "\u0438\u0439 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 e\u0301 combining \u00c5ngstr\u00f6m",
      "\U0001F44D\U0001F3FD \U0001F917 emoji \U0001F468\u200D\U0001F469\u200D\U0001F467 flags \U0001F1EB\U0001F1F7",
      "a  b   c    d",
      "  leading",
      "trailing   ",
      "\n\n\n",
      "   \n  \n\t \n",
      " ",
      "\n",
      "x",
      "x \u00a0 nbsp\u2003em\u3000ideographic\u2028line separator\u0085next line",
      "def f(x):\n    return x**2  # comment\n\n\nint main() { return 0; }\n",
      "for (int i=0;i<10;++i) {a[i]+=i;} // \"quoted\" 'single' `tick` $HOME ~/path\\back",
      "line1\r\nline2\r\n\r\nline3\r  \r\n\tindented\r\n",
      "\tindent\t\ttabs\t col1\tcol2\t\tcol3",
      "I'm don't they'll we've you'd DON'T 'S it'\u017f x'Re 'LL O'NEIL rock'n'roll",
      "<|endoftext|> literal <|im_start|>user\nhi<|im_end|>\n<s> </s> <unk> <repo_name>",
      "Hello!!! ??? ... --- (((nested))) [brackets] {braces} @user #tag $100 50% a&b <=> ->",
      "https://example.com/path?q=1&r=2#frag user@example.org C:\\Windows\\System32",
      "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX.",
      // Control characters SmolLM2's vocabulary has no byte symbol for: dropped before merging.
      "a\x04"
      "b (\x04) x\x13y \x04\x04 () \x1d\x16"
      "end",
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

// Runs the oracle; returns its records (text, ids).
std::vector<test::OracleRecord> oracle(const fs::path& model, const std::string& pre, const test::TempDir& dir,
                                       const std::string& inputs) {
  const fs::path out = dir / ("oracle-" + pre + ".jsonl");
  const std::string command = "python3 " + quoted(test::oracle_script("hf_gguf_tokenizer_oracle.py")) + " " +
                              quoted(model) + " " + pre + " " + quoted(out) + " " + inputs + " 2>&1";
  const int rc = std::system(command.c_str());
  EXPECT_EQ(rc, 0) << "oracle failed: " << command;
  return rc == 0 ? test::read_oracle_output(out) : std::vector<test::OracleRecord>{};
}

struct Compared {
  std::size_t texts = 0, tokens = 0;
};

// Every record encoded by `tok` must give the oracle's ids, and decode back to the text less
// the bytes the vocabulary has no symbol for (those encode to nothing).
Compared compare(const Tokenizer& tok, const std::vector<test::OracleRecord>& records) {
  std::array<bool, 256> dropped{};
  for (int b = 0; b < 256; ++b) dropped[b] = tok.encode(std::string(1, static_cast<char>(b))).empty();
  Compared c;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    const auto got = tok.encode(r.text);
    EXPECT_TRUE(test::ids_equal(got, r.ids, &tok)) << "record " << i << ": '" << r.text.substr(0, 200) << "'";
    std::string kept;
    for (char ch : r.text)
      if (!dropped[static_cast<unsigned char>(ch)]) kept.push_back(ch);
    EXPECT_EQ(tok.decode(got), kept) << "record " << i;
    if (got != r.ids) break;  // one reported difference is enough
    ++c.texts;
    c.tokens += r.ids.size();
  }
  return c;
}

TEST(GgufTokenizerOracle, SmolLM2MatchesHuggingFaceTokenizers) {
  const fs::path model = smollm2_path();
  if (const std::string why = why_not_runnable(model); !why.empty())
    GTEST_SKIP() << why << ": oracle comparison not run";
  // The .gguf is its own tokenizer: found by discovery, read by load_tokenizer.
  ASSERT_EQ(find_tokenizer_beside(model).value_or(""), model);
  const auto tok = load_tokenizer(model);
  EXPECT_EQ(tok->kind(), "gpt2-bpe");
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);              // <|im_start|>, as the GGUF says
  EXPECT_EQ(tok->eos_id(), 2);              // <|im_end|>
  EXPECT_EQ(tok->document_separator(), 0);  // <|endoftext|>
  EXPECT_FALSE(tok->adds_bos());            // tokenizer.ggml.add_bos_token = false

  test::TempDir dir;
  const std::string wikitext = quoted(test::data_path("text/wikitext-2-raw-v1/test.rows.jsonl"));
  const std::string c4 = quoted(test::data_path("text/c4/c4-en-validation-excerpt-1025.jsonl"));
  struct Input {
    const char* name;
    std::string spec;
    std::size_t min_texts;
  };
  for (const Input& in : {Input{"WikiText-2 test rows", wikitext + ":100000", 4358},
                          Input{"WikiText-2 test joined", quoted(write_joined_wikitext(dir)) + ":1", 1},
                          Input{"C4 excerpt", c4 + ":100000", 1025},
                          Input{"stress strings", quoted(write_stress_texts(dir)) + ":1000", 20}}) {
    SCOPED_TRACE(in.name);
    const auto records = oracle(model, "file", dir, in.spec);
    ASSERT_GE(records.size(), in.min_texts);
    const Compared c = compare(*tok, records);
    EXPECT_EQ(c.texts, records.size());
    std::printf("SmolLM2 GGUF vs Hugging Face tokenizers, %s: %zu texts, %zu tokens identical\n", in.name, c.texts,
                c.tokens);
  }
}

TEST(GgufTokenizerOracle, Llama3AndQwen2PreTokenizersMatchHuggingFace) {
  const fs::path model = smollm2_path();
  if (const std::string why = why_not_runnable(model); !why.empty())
    GTEST_SKIP() << why << ": oracle comparison not run";
  test::TempDir dir;
  const std::string inputs = quoted(write_stress_texts(dir)) + ":1000 " +
                             quoted(test::data_path("text/c4/c4-en-validation-excerpt-1025.jsonl")) + ":200 " +
                             quoted(test::data_path("text/wikitext-2-raw-v1/test.rows.jsonl")) + ":500";
  const GgufFile file(model);
  for (const char* pre : {"llama-bpe", "qwen2"}) {
    SCOPED_TRACE(pre);
    nlohmann::json metadata = file.metadata();
    metadata["tokenizer.ggml.pre"] = pre;
    const auto tok = gguf_tokenizer_from_metadata(metadata, model.string() + " with pre " + pre);
    const auto records = oracle(model, pre, dir, inputs);
    ASSERT_GE(records.size(), 700u);
    const Compared c = compare(*tok, records);
    EXPECT_EQ(c.texts, records.size());
    std::printf(
        "SmolLM2 vocabulary with pre %s vs Hugging Face Split(Regex) + ByteLevel: %zu texts, %zu tokens identical\n",
        pre, c.texts, c.tokens);
  }
}

// The pre-tokenizers alone, on raw text, against the same tokenizers pre-tokenizers: this needs
// no model, and it shows differences that SmolLM2's merges hide (they join no digits, and
// rarely a space or tab with what follows, so most pre-tokenizers give it the same ids).
TEST(GgufTokenizerOracle, PreTokenizersSplitLikeHuggingFace) {
  if (!test::python_has("tokenizers")) {
    GTEST_SKIP() << "python3 with the 'tokenizers' package is not available (pip install tokenizers): "
                    "pre-tokenizer oracle comparison not run";
  }
  test::TempDir dir;
  const std::string inputs = quoted(test::data_path("text/wikitext-2-raw-v1/test.rows.jsonl")) + ":100000 " +
                             quoted(test::data_path("text/c4/c4-en-validation-excerpt-1025.jsonl")) + ":100000 " +
                             quoted(write_stress_texts(dir)) + ":1000";
  struct Case {
    const char* oracle_name;
    BpePretokenizer pretokenizer;
  };
  for (const Case& c : {Case{"gpt2", BpePretokenizer::kGpt2}, Case{"smollm", BpePretokenizer::kSmollm},
                        Case{"llama-bpe", BpePretokenizer::kLlama3}, Case{"qwen2", BpePretokenizer::kQwen2}}) {
    SCOPED_TRACE(c.oracle_name);
    const fs::path out = dir / "pieces.jsonl";
    const std::string command = "python3 " + quoted(test::oracle_script("hf_gguf_tokenizer_oracle.py")) + " --pieces " +
                                c.oracle_name + " " + quoted(out) + " " + inputs + " 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << "oracle failed: " << command;
    std::ifstream in(out);
    std::string line;
    std::size_t texts = 0, pieces = 0;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      const std::string text = j.at("text").get<std::string>();
      const auto expected = j.at("pieces").get<std::vector<std::string>>();
      std::vector<std::string> got;
      for (auto piece : bpe_pretokenize(c.pretokenizer, text)) got.emplace_back(piece);
      if (got != expected) {
        std::size_t k = 0;
        while (k < got.size() && k < expected.size() && got[k] == expected[k]) ++k;
        FAIL() << "text " << texts << ": first different piece " << k << ": got '"
               << (k < got.size() ? got[k] : "<end>") << "', expected '"
               << (k < expected.size() ? expected[k] : "<end>") << "' in '" << text.substr(0, 200) << "'";
      }
      ++texts;
      pieces += expected.size();
    }
    EXPECT_GT(texts, 5400u);
    std::printf("pre-tokenizer %s vs Hugging Face: %zu texts, %zu pieces identical\n", c.oracle_name, texts, pieces);
  }
}

TEST(GgufTokenizerOracle, SmolLM2EncodesWikiText2TestWholeAndRoundTrips) {
  const fs::path model = smollm2_path();
  if (!fs::exists(model)) {
    GTEST_SKIP() << "SmolLM2-135M-Instruct Q4_1 GGUF not found at " << model
                 << " (scripts/models downloads it; QEVAL_MODEL_DIR overrides the folder): timing not run";
  }
  const auto load_start = std::chrono::steady_clock::now();
  const auto tok = load_tokenizer(model);
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const std::string text = read_file(test::data_path("text/wikitext-2-raw-v1/test.joined.txt"));
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tok->encode(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("SmolLM2 GGUF tokenizer: loaded in %.3f s; WikiText-2 test (%zu bytes) -> %zu tokens in %.3f s\n",
              load_seconds, text.size(), ids.size(), seconds);
  EXPECT_EQ(tok->decode(ids), text);
}

}  // namespace
}  // namespace qeval
