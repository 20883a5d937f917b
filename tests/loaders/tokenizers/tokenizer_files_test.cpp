// load_tokenizer's format detection, the tokenizer.json reader, and bad GPT-2 BPE files: each
// refusal names the file and what was wrong.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "common/error.h"
#include "common/files.h"
#include "loaders/tokenizers/gpt2_bpe.h"
#include "loaders/tokenizers/gpt2_unicode.h"
#include "loaders/tokenizers/tokenizer.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kSample =
    "The quick brown fox's 2 jumps: naïve café 👍\n\n  spaced   out  \t end. <|endoftext|> 12345";

// Expects load_tokenizer(path) to throw a qeval::Error whose message holds every `needle`.
void expect_error(const fs::path& path, const std::vector<std::string>& needles) {
  try {
    load_tokenizer(path);
    ADD_FAILURE() << "expected qeval::Error for " << path;
  } catch (const Error& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

// All 256 byte symbols of GPT-2's table as ids 0..255 (a minimal byte-level vocabulary).
json byte_vocab() {
  json v = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    unicode::append_utf8(gpt2_byte_to_unicode(static_cast<std::uint8_t>(b)), s);
    v[s] = b;
  }
  return v;
}

// The real GPT-2 vocabulary as a tokenizer.json, merges as "a b" strings or as pairs.
json gpt2_tokenizer_json(bool merges_as_pairs) {
  const fs::path dir = test::data_path("tokenizers/gpt2");
  json model = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false}};
  model["vocab"] = json::parse(read_file(dir / "encoder.json"));
  json merges = json::array();
  const std::string text = read_file(dir / "vocab.bpe");
  std::size_t pos = text.find('\n') + 1;
  while (pos < text.size()) {
    const std::size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    if (merges_as_pairs) {
      const auto sp = line.find(' ');
      merges.push_back(json::array({line.substr(0, sp), line.substr(sp + 1)}));
    } else {
      merges.push_back(line);
    }
  }
  model["merges"] = merges;
  return {{"version", "1.0"},
          {"added_tokens", json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}})},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                             {"use_regex", true}}},
          {"post_processor", {{"type", "ByteLevel"}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", model}};
}

void write_json(const fs::path& path, const json& j) { test::write_bytes(path, j.dump()); }

TEST(LoadTokenizer, DetectsEveryFormat) {
  const fs::path gpt2 = test::data_path("tokenizers/gpt2");
  const auto reference = load_tokenizer(gpt2 / "encoder.json");
  EXPECT_EQ(reference->kind(), "gpt2-bpe");
  const auto expected = reference->encode(kSample);

  test::TempDir dir;
  fs::create_directories(dir / "hf");
  fs::copy_file(gpt2 / "encoder.json", dir / "hf" / "vocab.json");
  fs::copy_file(gpt2 / "vocab.bpe", dir / "hf" / "merges.txt");
  fs::create_directories(dir / "json");
  write_json(dir / "json" / "tokenizer.json", gpt2_tokenizer_json(false));
  for (const fs::path& p : {gpt2, gpt2 / "vocab.bpe", dir / "hf", dir / "hf" / "vocab.json",
                            dir / "hf" / "merges.txt", dir / "json", dir / "json" / "tokenizer.json"}) {
    const auto tok = load_tokenizer(p);
    EXPECT_EQ(tok->kind(), "gpt2-bpe") << p;
    EXPECT_EQ(tok->vocab_size(), 50257) << p;
    EXPECT_TRUE(test::ids_equal(tok->encode(kSample), expected)) << p;
  }
  EXPECT_EQ(load_tokenizer(test::data_path("models/stories260K/tok512.model"))->kind(), "sentencepiece");
  EXPECT_EQ(load_tokenizer(test::data_path("models/stories260K/tok512.bin"))->kind(), "llama2c");
  EXPECT_EQ(load_tokenizer(test::data_path("tokenizers/llama2"))->kind(), "sentencepiece");
  EXPECT_EQ(load_tokenizer(test::data_path("tokenizers/llama2/tokenizer.bin"))->vocab_size(), 32000);
}

TEST(LoadTokenizer, TokenizerJsonVariants) {
  const auto reference = load_tokenizer(test::data_path("tokenizers/gpt2"));
  test::TempDir dir;
  // Merges as ["a", "b"] pairs (tokenizers >= 0.20) read the same.
  write_json(dir / "pairs.json", gpt2_tokenizer_json(true));
  const auto pairs = Gpt2BpeTokenizer::from_tokenizer_json(dir / "pairs.json");
  EXPECT_TRUE(test::ids_equal(pairs->encode(kSample), reference->encode(kSample)));
  EXPECT_EQ(pairs->eos_id(), 50256);
  EXPECT_EQ(pairs->decode({50256}), "<|endoftext|>");
  // add_prefix_space: a space goes before text that does not start with one.
  json j = gpt2_tokenizer_json(false);
  j["pre_tokenizer"]["add_prefix_space"] = true;
  write_json(dir / "prefix.json", j);
  const auto prefixed = Gpt2BpeTokenizer::from_tokenizer_json(dir / "prefix.json");
  EXPECT_TRUE(test::ids_equal(prefixed->encode("Hello world"), reference->encode(" Hello world")));
  EXPECT_TRUE(test::ids_equal(prefixed->encode(" Hello"), reference->encode(" Hello")));
}

// A vocabulary that lacks a byte symbol: without unk_token, Hugging Face's BPE skips the byte (as
// SmolLM2's tokenizer.json, which lacks 21 of them, is read); with one, it is refused.
TEST(LoadTokenizer, TokenizerJsonWithoutAByteSymbolDropsItUnlessItHasAnUnknownToken) {
  const auto reference = load_tokenizer(test::data_path("tokenizers/gpt2"));
  test::TempDir dir;
  json j = gpt2_tokenizer_json(false);
  std::string x;
  unicode::append_utf8(gpt2_byte_to_unicode(static_cast<std::uint8_t>('x')), x);
  j["model"]["vocab"].erase(x);
  json merges = json::array();  // the merges that do not make or use "x"
  for (const json& m : j["model"]["merges"])
    if (m.get<std::string>().find('x') == std::string::npos) merges.push_back(m);
  j["model"]["merges"] = merges;
  write_json(dir / "tokenizer.json", j);
  const auto dropped = Gpt2BpeTokenizer::from_tokenizer_json(dir / "tokenizer.json");
  EXPECT_TRUE(test::ids_equal(dropped->encode("hello world"), reference->encode("hello world")));
  EXPECT_TRUE(test::ids_equal(dropped->encode("xhello xworld"), reference->encode("hello world")));
  j["model"]["unk_token"] = "<unk>";
  write_json(dir / "tokenizer.json", j);
  expect_error(dir / "tokenizer.json", {"tokenizer.json", "byte 0x78"});
}

TEST(LoadTokenizer, UnsupportedTokenizerJsonIsRefused) {
  test::TempDir dir;
  json j = gpt2_tokenizer_json(false);
  j["normalizer"] = {{"type", "NFC"}};
  write_json(dir / "tokenizer.json", j);
  expect_error(dir / "tokenizer.json", {"tokenizer.json", "normalizer"});
  j = gpt2_tokenizer_json(false);
  j["model"]["type"] = "WordPiece";
  write_json(dir / "tokenizer.json", j);
  expect_error(dir / "tokenizer.json", {"tokenizer.json", "WordPiece"});
  j = gpt2_tokenizer_json(false);
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  write_json(dir / "tokenizer.json", j);
  expect_error(dir / "tokenizer.json", {"tokenizer.json", "Metaspace"});
  j = gpt2_tokenizer_json(false);
  j["model"].erase("vocab");
  write_json(dir / "tokenizer.json", j);
  expect_error(dir / "tokenizer.json", {"tokenizer.json", "vocab"});
}

TEST(LoadTokenizer, BadGpt2FilesNameTheFile) {
  test::TempDir dir;
  const std::string merges = "#version: 0.2\na b\n";
  // Malformed encoder.json.
  fs::create_directories(dir / "malformed");
  test::write_bytes(dir / "malformed" / "encoder.json", "{\"a\": 1, \"b\": ");
  test::write_bytes(dir / "malformed" / "vocab.bpe", merges);
  expect_error(dir / "malformed" / "encoder.json", {"encoder.json", "not valid JSON"});
  // Ids that are not integers.
  fs::create_directories(dir / "strings");
  test::write_bytes(dir / "strings" / "encoder.json", "{\"a\": \"1\"}");
  test::write_bytes(dir / "strings" / "vocab.bpe", merges);
  expect_error(dir / "strings" / "encoder.json", {"encoder.json", "'a'", "integer"});
  // A vocabulary without all 256 byte symbols.
  fs::create_directories(dir / "nobytes");
  json v = byte_vocab();
  v.erase("Ġ");
  write_json(dir / "nobytes" / "encoder.json", v);
  test::write_bytes(dir / "nobytes" / "vocab.bpe", merges);
  expect_error(dir / "nobytes" / "encoder.json", {"encoder.json", "0x20"});
  // Merges referencing a symbol the vocabulary lacks, or making one it lacks.
  fs::create_directories(dir / "unknown");
  v = byte_vocab();
  v["ab"] = 256;
  write_json(dir / "unknown" / "encoder.json", v);
  test::write_bytes(dir / "unknown" / "vocab.bpe", "#version: 0.2\na b\nab zz\n");
  expect_error(dir / "unknown" / "encoder.json", {"vocab.bpe", "merge 2", "'zz'"});
  test::write_bytes(dir / "unknown" / "vocab.bpe", "#version: 0.2\na b\nab c\n");
  expect_error(dir / "unknown" / "encoder.json", {"vocab.bpe", "'abc'"});
  // A merges line that is not two symbols.
  test::write_bytes(dir / "unknown" / "vocab.bpe", "#version: 0.2\na b\nabc\n");
  expect_error(dir / "unknown" / "encoder.json", {"vocab.bpe", "line 3"});
  // Missing merges file, by file and by folder.
  fs::create_directories(dir / "nomerges");
  write_json(dir / "nomerges" / "vocab.json", byte_vocab());
  expect_error(dir / "nomerges" / "vocab.json", {"merges.txt", "missing"});
  expect_error(dir / "nomerges", {"merges.txt", "missing"});
  // Nothing recognisable.
  test::write_bytes(dir / "weights.xyz", "x");
  expect_error(dir / "weights.xyz", {"weights.xyz"});
  fs::create_directories(dir / "emptydir");
  expect_error(dir / "emptydir", {"emptydir", "no tokenizer"});
  expect_error(dir / "absent.json", {"absent.json"});
}

}  // namespace
}  // namespace qeval
