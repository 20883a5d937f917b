// Tokenizers from GGUF metadata (loaders/tokenizers/gguf_tokenizer.h): the named byte-level
// pre-tokenizers on strings whose pieces Hugging Face `tokenizers` gave (copied here), small
// made-up vocabularies that pin down merge order, byte fallback, special tokens and the ids
// the metadata names, the stories260K GGUF and a GGUF-style Llama-2 vocabulary against
// libsentencepiece on real text, load_tokenizer/discovery on .gguf files, and refusals that
// name the file and the key.
#include "loaders/tokenizers/gguf_tokenizer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/gguf.h"
#include "loaders/tokenizers/bpe_pretokenizers.h"
#include "loaders/tokenizers/gpt2_bpe.h"
#include "loaders/tokenizers/gpt2_pretokenize.h"
#include "loaders/tokenizers/gpt2_unicode.h"
#include "loaders/tokenizers/llama2c_tokenizer.h"
#include "loaders/tokenizers/sentencepiece_tokenizer.h"
#include "loaders/tokenizers/tokenizer_discovery.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Pieces = std::vector<std::string>;

constexpr int kControl = 3, kUserDefined = 4, kByte = 6;

fs::path stories_gguf() { return test::data_path("models/stories260K/stories260K-tok512-f32.gguf"); }

Pieces pretokenize(BpePretokenizer p, std::string_view text) {
  Pieces out;
  for (auto piece : bpe_pretokenize(p, text)) out.emplace_back(piece);
  return out;
}

// ---- pre-tokenizers: expected pieces from tokenizers' Split(Regex(...), "isolated") / Digits

TEST(GgufTokenizerPretokenize, Llama3MatchesHuggingFaceSplit) {
  const auto p = BpePretokenizer::kLlama3;
  EXPECT_EQ(pretokenize(p, "Hello world's 12345 x  \n  y\r\n\tz (word) '\u017fx DON'T"),
            (Pieces{"Hello", " world", "'s", " ", "123", "45", " x", "  \n", " ", " y", "\r\n", "\tz", " (", "word",
                    ")", " '", "\u017fx", " DON", "'T"}));
  EXPECT_EQ(
      pretokenize(p, "a1b22 \u0663\u0664\u0665 \u00bdx  \t\n\n  end  "),
      (Pieces{"a", "1", "b", "22", " ", "\u0663\u0664\u0665", " ", "\u00bd", "x", "  \t\n\n", " ", " end", "  "}));
  EXPECT_EQ(pretokenize(p, " ((x ...\n\n"), (Pieces{" ((", "x", " ...\n\n"}));
  EXPECT_EQ(pretokenize(p, "I've 'LL 'Re"), (Pieces{"I", "'ve", " '", "LL", " '", "Re"}));
  // (?i:'s) also matches the long s, whose case fold is s.
  EXPECT_EQ(pretokenize(p, "it'\u017f ok x'S"), (Pieces{"it", "'\u017f", " ok", " x", "'S"}));
  EXPECT_EQ(pretokenize(p, "a \u00a0b\u3000c"), (Pieces{"a", " ", "\u00a0b", "\u3000c"}));
  EXPECT_EQ(pretokenize(p, "end\n"), (Pieces{"end", "\n"}));
  EXPECT_TRUE(pretokenize(p, "").empty());
}

TEST(GgufTokenizerPretokenize, Qwen2SplitsSingleDigits) {
  const auto p = BpePretokenizer::kQwen2;
  EXPECT_EQ(pretokenize(p, "Hello world's 12345 x  \n  y\r\n\tz (word) '\u017fx DON'T"),
            (Pieces{"Hello", " world", "'s",   " ",   "1",  "2",    "3", "4",  "5",       " x",   "  \n",
                    " ",     " y",     "\r\n", "\tz", " (", "word", ")", " '", "\u017fx", " DON", "'T"}));
  EXPECT_EQ(pretokenize(p, "a1b22 \u0663\u0664\u0665 \u00bdx  \t\n\n  end  "),
            (Pieces{"a", "1", "b", "2", "2", " ", "\u0663", "\u0664", "\u0665", " ", "\u00bd", "x", "  \t\n\n", " ",
                    " end", "  "}));
}

TEST(GgufTokenizerPretokenize, SmollmIsolatesDigitsThenGpt2) {
  const auto p = BpePretokenizer::kSmollm;
  EXPECT_EQ(pretokenize(p, "Hello world's 12345 x  \n  y\r\n\tz (word) '\u017fx DON'T"),
            (Pieces{"Hello", " world", "'s", " ",  "1",    "2", "3",  "4",       "5",    " x", "  \n ", " y",
                    "\r\n",  "\t",     "z",  " (", "word", ")", " '", "\u017fx", " DON", "'",  "T"}));
  EXPECT_EQ(pretokenize(p, "a1b22 \u0663\u0664\u0665 \u00bdx  \t\n\n  end  "),
            (Pieces{"a", "1", "b", "2", "2", " ", "\u0663", "\u0664", "\u0665", " ", "\u00bd", "x", "  \t\n\n ", " end",
                    "  "}));
  EXPECT_EQ(pretokenize(p, " ((x ...\n\n"), (Pieces{" ((", "x", " ...", "\n\n"}));
}

TEST(GgufTokenizerPretokenize, Gpt2IsTheExistingScanner) {
  const std::string text = "Hello world's 12345 x  \n  y\r\n\tz";
  Pieces expected;
  for (auto piece : gpt2_pretokenize(text)) expected.emplace_back(piece);
  EXPECT_EQ(pretokenize(BpePretokenizer::kGpt2, text), expected);
}

// ---- made-up vocabularies

std::string byte_symbol(int b) {
  std::string s;
  unicode::append_utf8(gpt2_byte_to_unicode(static_cast<std::uint8_t>(b)), s);
  return s;
}

// A byte-level vocabulary: the 256 byte symbols (ids 0..255), "he", "ll", "hell", "hello"
// (256..259) from four merges, then `extra` tokens with their types.
json byte_level_metadata(const std::vector<std::pair<std::string, int>>& extra = {}, const std::string& pre = "gpt-2") {
  json tokens = json::array(), types = json::array();
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_symbol(b));
    types.push_back(1);
  }
  for (const char* t : {"he", "ll", "hell", "hello"}) {
    tokens.push_back(t);
    types.push_back(1);
  }
  for (const auto& [text, type] : extra) {
    tokens.push_back(text);
    types.push_back(type);
  }
  return {{"tokenizer.ggml.model", "gpt2"},
          {"tokenizer.ggml.pre", pre},
          {"tokenizer.ggml.tokens", tokens},
          {"tokenizer.ggml.token_type", types},
          {"tokenizer.ggml.merges", {"h e", "l l", "he ll", "hell o"}}};
}

TEST(GgufTokenizerBpe, MergesUserDefinedAndControlTokens) {
  // 260 "<tool>" user-defined, 261 "<|ctl|>" control, 262 "<|endoftext|>" control.
  auto md = byte_level_metadata({{"<tool>", kUserDefined}, {"<|ctl|>", kControl}, {"<|endoftext|>", kControl}});
  md["tokenizer.ggml.bos_token_id"] = 261;
  md["tokenizer.ggml.eos_token_id"] = 261;
  const auto tok = gguf_tokenizer_from_metadata(md, "made-up.gguf");
  EXPECT_EQ(tok->kind(), "gpt2-bpe");
  EXPECT_EQ(tok->vocab_size(), 263);
  EXPECT_EQ(tok->bos_id(), 261);
  EXPECT_EQ(tok->eos_id(), 261);
  EXPECT_EQ(tok->document_separator(), 262);  // <|endoftext|> wins over EOS
  EXPECT_FALSE(tok->adds_bos());
  // Byte-level ids: the vocabulary lists byte b's symbol at id b.
  EXPECT_EQ(tok->encode("hello"), (std::vector<std::int32_t>{259}));
  EXPECT_EQ(tok->encode("hell"), (std::vector<std::int32_t>{258}));
  EXPECT_EQ(tok->encode("help"), (std::vector<std::int32_t>{256, 'l', 'p'}));
  // The user-defined token is cut out of the text; the control token's text stays text.
  std::vector<std::int32_t> expected = {259, 260, ' '};
  for (unsigned char c : std::string("<|ctl|>")) expected.push_back(c);
  EXPECT_EQ(tok->encode("hello<tool> <|ctl|>"), expected);
  EXPECT_EQ(tok->decode(tok->encode("hello<tool> <|ctl|>")), "hello<tool> <|ctl|>");
  EXPECT_EQ(tok->decode({262}), "<|endoftext|>");
}

// SmolLM2's vocabulary lacks 21 byte symbols (0x04, 0x13, 0xF5..0xFF, ...): such bytes are
// dropped before merging, as Hugging Face's BPE without an unknown token drops them.
TEST(GgufTokenizerBpe, BytesWithoutASymbolAreDropped) {
  auto md = byte_level_metadata();
  md["tokenizer.ggml.tokens"]['x'] = "no x";
  const auto tok = gguf_tokenizer_from_metadata(md, "x");
  EXPECT_EQ(tok->encode("hxe"), (std::vector<std::int32_t>{256}));  // "he" merges across the gap
  EXPECT_EQ(tok->encode("x x"), (std::vector<std::int32_t>{' '}));
}

TEST(GgufTokenizerBpe, UserDefinedTokensLongestFirstAsLlamaCpp) {
  // 260 "ab", 261 "bcd": llama.cpp cuts the longer token out first, so "abcd" -> a, bcd.
  const auto tok =
      gguf_tokenizer_from_metadata(byte_level_metadata({{"ab", kUserDefined}, {"bcd", kUserDefined}}), "x");
  EXPECT_EQ(tok->encode("abcd"), (std::vector<std::int32_t>{'a', 261}));
  EXPECT_EQ(tok->encode("abab"), (std::vector<std::int32_t>{260, 260}));
  EXPECT_TRUE(tok->encode("").empty());
}

TEST(GgufTokenizerBpe, NoEndOfTextSeparatesWithEosAndLlamaBpeAddsBos) {
  auto md = byte_level_metadata({{"<|begin_of_text|>", kControl}, {"<|eot|>", kControl}}, "llama-bpe");
  md["tokenizer.ggml.bos_token_id"] = 260u;
  md["tokenizer.ggml.eos_token_id"] = 261u;
  auto tok = gguf_tokenizer_from_metadata(md, "x");
  EXPECT_EQ(tok->document_separator(), 261);
  EXPECT_TRUE(tok->adds_bos());  // llama.cpp's default for llama-bpe
  // ignore_merges: a piece that is a whole token is kept even without a merge path to it.
  md["tokenizer.ggml.tokens"].push_back("xyz");
  md["tokenizer.ggml.token_type"].push_back(1);
  md["tokenizer.ggml.add_bos_token"] = false;
  tok = gguf_tokenizer_from_metadata(md, "x");
  EXPECT_FALSE(tok->adds_bos());
  EXPECT_EQ(tok->encode("xyz"), (std::vector<std::int32_t>{262}));
  md["tokenizer.ggml.pre"] = "qwen2";
  EXPECT_EQ(gguf_tokenizer_from_metadata(md, "x")->encode("xyz"), (std::vector<std::int32_t>{'x', 'y', 'z'}));
}

// A SentencePiece-style vocabulary: <unk> <s> </s>, the 256 <0xNN> byte tokens (3..258), then
// `pieces` with scores.
json spm_metadata(const std::vector<std::tuple<std::string, float, int>>& pieces) {
  json tokens = {"<unk>", "<s>", "</s>"}, scores = {0.0, 0.0, 0.0}, types = {2, kControl, kControl};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    scores.push_back(0.0);
    types.push_back(kByte);
  }
  for (const auto& [text, score, type] : pieces) {
    tokens.push_back(text);
    scores.push_back(score);
    types.push_back(type);
  }
  return {{"tokenizer.ggml.model", "llama"},
          {"tokenizer.ggml.tokens", tokens},
          {"tokenizer.ggml.scores", scores},
          {"tokenizer.ggml.token_type", types}};
}

const std::string kMark = "\xE2\x96\x81";  // U+2581

TEST(GgufTokenizerSpm, MergesByScoreLeftmostOnTiesWithByteFallback) {
  // 259 ▁, 260 a, 261 b, 262 ab, 263 ▁a, 264 ▁ab, 265 aa, 266 <x> (user-defined)
  const auto md = spm_metadata({{kMark, -1, 1},
                                {"a", -2, 1},
                                {"b", -3, 1},
                                {"ab", -1.5f, 1},
                                {kMark + "a", -4, 1},
                                {kMark + "ab", -5, 1},
                                {"aa", -1, 1},
                                {"<x>", 0, kUserDefined}});
  const auto tok = gguf_tokenizer_from_metadata(md, "spm.gguf");
  EXPECT_EQ(tok->kind(), "gguf-spm");
  EXPECT_EQ(tok->bos_id(), 1);  // llama.cpp's defaults when the keys are absent
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->document_separator(), 1);
  EXPECT_TRUE(tok->adds_bos());
  // "▁ab": ab (-1.5) before ▁a (-4), then ▁ab.
  EXPECT_EQ(tok->encode("ab"), (std::vector<std::int32_t>{264}));
  // "▁aaa": aa (-1) scores above ▁a (-4); of the two equal aa pairs the leftmost merges.
  EXPECT_EQ(tok->encode("aaa"), (std::vector<std::int32_t>{259, 265, 260}));
  // é is no token: its two bytes.
  EXPECT_EQ(tok->encode("\xC3\xA9"), (std::vector<std::int32_t>{259, 3 + 0xC3, 3 + 0xA9}));
  // A user-defined token is cut out, and the text after it gets the space prefix again.
  EXPECT_EQ(tok->encode("a<x>b"), (std::vector<std::int32_t>{263, 266, 259, 261}));
  EXPECT_EQ(tok->decode(tok->encode("ab aa\xC3\xA9")), "ab aa\xC3\xA9");
  EXPECT_EQ(tok->decode({1, 264, 2}), "ab");  // BOS/EOS decode to nothing
  EXPECT_TRUE(tok->encode("").empty());

  auto no_prefix = md;
  no_prefix["tokenizer.ggml.add_space_prefix"] = false;
  no_prefix["tokenizer.ggml.add_bos_token"] = false;
  const auto plain = gguf_tokenizer_from_metadata(no_prefix, "spm.gguf");
  EXPECT_EQ(plain->encode("aaa"), (std::vector<std::int32_t>{265, 260}));
  EXPECT_EQ(plain->encode("a b"), (std::vector<std::int32_t>{260, 259, 261}));
  EXPECT_FALSE(plain->adds_bos());
  EXPECT_EQ(plain->decode(plain->encode(" a b")), " a b");
}

// ---- real vocabularies against libsentencepiece

// Texts to compare on: WikiText-2 test rows, TinyStories paragraphs, C4 documents, hard strings.
std::vector<std::string> real_texts(std::size_t wikitext_rows, std::size_t c4_docs) {
  std::vector<std::string> texts =
      test::read_jsonl_texts(test::data_path("text/wikitext-2-raw-v1/test.rows.jsonl"), wikitext_rows);
  for (auto& p : test::split_paragraphs(read_file(test::data_path("text/tinystories/validation-head.txt"))))
    texts.push_back(std::move(p));
  for (auto& d : test::read_jsonl_texts(test::data_path("text/c4/c4-en-validation-excerpt-1025.jsonl"), c4_docs))
    texts.push_back(std::move(d));
  for (const char* s : {"Hello world", "In 2023, 3.14159 and 1000000 ducks.", "naïve café, Zürich, Ελληνικά, 日本語",
                        "emoji 👍🏽 and 🤗 need byte fallback", "tab\tseparated\tvalues",
                        "line one\nline two\n\n", "<s> and </s> and <unk> are text here", "x"})
    texts.emplace_back(s);
  return texts;
}

// stories260K's GGUF carries tok512's pieces, scores and types; libsentencepiece with
// tok512.model also removes extra spaces (remove_extra_whitespaces, which llama.cpp's SPM path
// does not apply), so the two agree on normalise_spaces(text).
TEST(GgufTokenizerSpm, Stories260kGgufMatchesLibsentencepieceOnRealText) {
  const auto gguf = load_tokenizer(stories_gguf());
  const auto spm = SentencePieceTokenizer::load(test::data_path("models/stories260K/tok512.model"));
  ASSERT_EQ(gguf->kind(), "gguf-spm");
  ASSERT_EQ(gguf->vocab_size(), 512);
  EXPECT_EQ(gguf->bos_id(), 1);
  EXPECT_EQ(gguf->eos_id(), 2);
  EXPECT_EQ(gguf->document_separator(), 1);
  EXPECT_TRUE(gguf->adds_bos());
  const auto texts = real_texts(100000, 1025);
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string text = test::normalise_spaces(texts[i]);
    const auto expected = spm->encode(text);
    tokens += expected.size();
    const auto got = gguf->encode(text);
    ASSERT_TRUE(test::ids_equal(got, expected, spm.get())) << "text " << i << ": '" << text.substr(0, 200) << "'";
    ASSERT_EQ(gguf->decode(got), text) << "text " << i;
  }
  std::printf("stories260K GGUF vs tok512.model: %zu texts, %zu tokens identical\n", texts.size(), tokens);
  EXPECT_GT(tokens, 1000000u);
}

// Llama-2's vocabulary as a GGUF converter writes it (pieces with U+2581, <unk> <s> </s>, types),
// rebuilt from its llama2.c export, against libsentencepiece with tokenizer.model (which keeps
// spaces as they are, so no normalisation on either side).
TEST(GgufTokenizerSpm, Llama2VocabularyMatchesLibsentencepieceOnRealText) {
  const auto bin = Llama2cTokenizer::load(test::data_path("tokenizers/llama2/tokenizer.bin"));
  json pieces = json::array(), scores = json::array(), types = json::array();
  for (std::int32_t i = 0; i < bin->vocab_size(); ++i) {
    std::string piece = i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : bin->piece(i);
    int type = i == 0 ? 2 : i <= 2 ? kControl : 1;
    if (i > 2 && piece.size() == 6 && piece.rfind("<0x", 0) == 0) type = kByte;
    std::string marked;
    for (char c : piece) marked += c == ' ' ? kMark : std::string(1, c);
    pieces.push_back(marked);
    scores.push_back(bin->score(i));
    types.push_back(type);
  }
  const json md = {{"tokenizer.ggml.model", "llama"},  {"tokenizer.ggml.tokens", pieces},
                   {"tokenizer.ggml.scores", scores},  {"tokenizer.ggml.token_type", types},
                   {"tokenizer.ggml.bos_token_id", 1}, {"tokenizer.ggml.eos_token_id", 2}};
  const auto gguf = gguf_tokenizer_from_metadata(md, "llama2 (rebuilt)");
  const auto spm = SentencePieceTokenizer::load(test::data_path("tokenizers/llama2/tokenizer.model"));
  ASSERT_EQ(gguf->vocab_size(), 32000);
  const auto texts = real_texts(1500, 1025);
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto expected = spm->encode(texts[i]);
    tokens += expected.size();
    const auto got = gguf->encode(texts[i]);
    ASSERT_TRUE(test::ids_equal(got, expected, spm.get())) << "text " << i << ": '" << texts[i].substr(0, 200) << "'";
    ASSERT_EQ(gguf->decode(got), texts[i]) << "text " << i;
  }
  std::printf("Llama-2 vocabulary as GGUF metadata vs tokenizer.model: %zu texts, %zu tokens identical\n", texts.size(),
              tokens);
  EXPECT_GT(tokens, 800000u);
}

TEST(GgufTokenizerSpm, EncodesWikiText2TestWholeAndRoundTrips) {
  const auto tok = load_tokenizer(stories_gguf());
  const std::string text = read_file(test::data_path("text/wikitext-2-raw-v1/test.joined.txt"));
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tok->encode(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("stories260K GGUF tokenizer: WikiText-2 test (%zu bytes) -> %zu tokens in %.3f s\n", text.size(),
              ids.size(), seconds);
  EXPECT_EQ(tok->decode(ids), text);
}

// ---- files and discovery

// A GGUF v3 file with general.architecture only: a model without a tokenizer.
std::string gguf_without_tokenizer() {
  auto pod = [](auto v) {
    std::string s(sizeof v, '\0');
    std::memcpy(s.data(), &v, sizeof v);
    return s;
  };
  auto str = [&](const std::string& s) { return pod(std::uint64_t{s.size()}) + s; };
  std::string out = "GGUF" + pod(std::uint32_t{3}) + pod(std::uint64_t{0}) + pod(std::uint64_t{1});
  out += str("general.architecture") + pod(std::uint32_t{8}) + str("llama");
  out.append((32 - out.size() % 32) % 32, '\0');
  return out;
}

TEST(GgufTokenizerFiles, LoadTokenizerAndDiscoveryUseTheGgufItself) {
  EXPECT_EQ(load_tokenizer(stories_gguf())->kind(), "gguf-spm");
  const auto found = find_tokenizer_beside(stories_gguf());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, stories_gguf());
  EXPECT_TRUE(gguf_has_tokenizer(stories_gguf()));

  // A GGUF without tokenizer metadata: discovery looks beside it; loading it names the key.
  test::TempDir dir;
  test::write_bytes(dir / "bare.gguf", gguf_without_tokenizer());
  EXPECT_FALSE(gguf_has_tokenizer(dir / "bare.gguf"));
  EXPECT_FALSE(find_tokenizer_beside(dir / "bare.gguf").has_value());
  test::write_bytes(dir / "tok512.model", read_file(test::data_path("models/stories260K/tok512.model")));
  EXPECT_EQ(find_tokenizer_beside(dir / "bare.gguf").value_or(""), dir / "tok512.model");
  EXPECT_TRUE(test::throws_with([&] { load_tokenizer(dir / "bare.gguf"); },
                                {(dir / "bare.gguf").string(), "tokenizer.ggml.model"}));
}

// ---- refusals: each names the source and the key

void expect_refused(const json& md, std::initializer_list<std::string> parts) {
  EXPECT_TRUE(test::throws_with([&] { gguf_tokenizer_from_metadata(md, "bad.gguf"); }, parts))
      << md.dump().substr(0, 300);
}

TEST(GgufTokenizerErrors, MalformedMetadataIsRefusedNamingFileAndKey) {
  const json good = byte_level_metadata();
  ASSERT_NO_THROW(gguf_tokenizer_from_metadata(good, "bad.gguf"));
  auto with = [&](const std::string& key, const json& value) {
    json md = good;
    if (value.is_null()) {
      md.erase(key);
    } else {
      md[key] = value;
    }
    return md;
  };
  expect_refused(with("tokenizer.ggml.model", nullptr), {"bad.gguf", "tokenizer.ggml.model", "missing"});
  expect_refused(with("tokenizer.ggml.model", "bert"), {"bad.gguf", "tokenizer.ggml.model", "'bert'"});
  expect_refused(with("tokenizer.ggml.model", 3), {"bad.gguf", "tokenizer.ggml.model", "string"});
  expect_refused(with("tokenizer.ggml.pre", "falcon"),
                 {"bad.gguf", "tokenizer.ggml.pre", "'falcon'", "default", "smollm", "llama-bpe", "qwen2"});
  expect_refused(with("tokenizer.ggml.tokens", nullptr), {"bad.gguf", "tokenizer.ggml.tokens", "missing"});
  expect_refused(with("tokenizer.ggml.tokens", "abc"), {"bad.gguf", "tokenizer.ggml.tokens", "array"});
  expect_refused(with("tokenizer.ggml.tokens", json::array()), {"bad.gguf", "tokenizer.ggml.tokens", "empty"});
  json tokens = good["tokenizer.ggml.tokens"];
  tokens[5] = 7;
  expect_refused(with("tokenizer.ggml.tokens", tokens), {"bad.gguf", "tokenizer.ggml.tokens[5]", "string"});
  tokens = good["tokenizer.ggml.tokens"];
  tokens[257] = "he";
  expect_refused(with("tokenizer.ggml.tokens", tokens), {"bad.gguf", "tokenizer.ggml.tokens", "'he' twice"});
  expect_refused(with("tokenizer.ggml.token_type", {1, 1}), {"bad.gguf", "tokenizer.ggml.token_type", "2 entries"});
  expect_refused(with("tokenizer.ggml.scores", json::array({1.0})),
                 {"bad.gguf", "tokenizer.ggml.scores", "one per token"});
  expect_refused(with("tokenizer.ggml.merges", nullptr), {"bad.gguf", "tokenizer.ggml.merges", "missing"});
  expect_refused(with("tokenizer.ggml.merges", {"h e", "hx"}), {"bad.gguf", "tokenizer.ggml.merges[1]", "two symbols"});
  expect_refused(with("tokenizer.ggml.merges", {"h q"}), {"bad.gguf", "tokenizer.ggml.merges[0]", "makes 'hq'"});
  expect_refused(with("tokenizer.ggml.merges", {"h zz"}), {"bad.gguf", "tokenizer.ggml.merges[0]", "uses 'zz'"});
  expect_refused(with("tokenizer.ggml.bos_token_id", 260), {"bad.gguf", "tokenizer.ggml.bos_token_id", "260"});
  expect_refused(with("tokenizer.ggml.eos_token_id", "2"), {"bad.gguf", "tokenizer.ggml.eos_token_id", "integer"});
  expect_refused(with("tokenizer.ggml.add_bos_token", true), {"bad.gguf", "add_bos_token", "bos_token_id"});
  expect_refused(with("tokenizer.ggml.add_bos_token", 1), {"bad.gguf", "tokenizer.ggml.add_bos_token", "bool"});
  // -1 / 0xFFFFFFFF mean "unset", as converters write them.
  EXPECT_FALSE(
      gguf_tokenizer_from_metadata(with("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu), "x")->bos_id().has_value());
  EXPECT_FALSE(gguf_tokenizer_from_metadata(with("tokenizer.ggml.bos_token_id", -1), "x")->bos_id().has_value());

  const json spm = spm_metadata({{kMark, -1, 1}});
  json no_scores = spm;
  no_scores.erase("tokenizer.ggml.scores");
  expect_refused(no_scores, {"bad.gguf", "tokenizer.ggml.scores", "missing"});
  json nan_score = spm;
  nan_score["tokenizer.ggml.scores"][4] = std::nan("");
  expect_refused(nan_score, {"bad.gguf", "tokenizer.ggml.scores[4]", "NaN"});
  json not_object = json::array();
  expect_refused(not_object, {"bad.gguf", "object"});
}

}  // namespace
}  // namespace qeval
