// SentencePiece through libsentencepiece (behind the dlopen'ed shim) against llama2.c's
// tokenizer.bin encoder: two independent implementations of the same BPE must give the same
// ids. This binary links LibTorch, so it also shows the shim keeps sentencepiece's protobuf
// away from LibTorch's.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/files.h"
#include "loaders/tokenizers/llama2c_tokenizer.h"
#include "loaders/tokenizers/sentencepiece_tokenizer.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"
#include "tests/support/test_data.h"

#include <ATen/ATen.h>

namespace qeval {
namespace {

// Strings where the encoders could disagree: space runs and leading/trailing spaces (Llama-2's
// model keeps them, tok512's normalises them away), digits (split_digits), newlines and
// characters outside the vocabulary (byte fallback <0xNN>, 4 bytes for the emoji).
const std::vector<std::string> kHardStrings = {
    "Hello world",
    "  two leading spaces",
    "trailing spaces   ",
    "a  b   c    d",
    " ",
    "\n",
    "line one\nline two\n\n",
    "In 2023, 3.14159 and 1000000 ducks.",
    "Don't, won't, can't; \"quoted\" (parens) [brackets] {braces}!?",
    "naïve café, Zürich, Ελληνικά, русский, 日本語, 한국어",
    "emoji 👍🏽 and 🤗 need byte fallback",
    "tab\tseparated\tvalues",
    "x",
};

TEST(SentencePiece, Tok512ModelLoadsThroughTheShimInALibTorchProcess) {
  // A LibTorch call first: the protobuf clash used to kill such a process at start-up.
  EXPECT_EQ(at::ones({2, 2}).sum().item<float>(), 4.0f);
  const auto tok = SentencePieceTokenizer::load(test::data_path("models/stories260K/tok512.model"));
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->document_separator(), 1);
  EXPECT_EQ(tok->kind(), "sentencepiece");
  EXPECT_FALSE(SentencePieceTokenizer::shim_path().empty());
}

// tok512.model was trained with SentencePiece's default remove_extra_whitespaces (Llama-2's
// model turns it off): it drops leading/trailing ASCII spaces and collapses runs of them before
// encoding. llama2.c's encode() has no normaliser and tokenizer.bin cannot carry the flag, so the
// two agree on text that normalisation leaves alone, and on normalise_spaces(text) in general.
TEST(SentencePiece, Tok512ModelNormalisesSpacesTheBinDoesNot) {
  const auto spm = SentencePieceTokenizer::load(test::data_path("models/stories260K/tok512.model"));
  const auto bin = Llama2cTokenizer::load(test::data_path("models/stories260K/tok512.bin"));
  EXPECT_TRUE(test::ids_equal(spm->encode("  a  b "), spm->encode("a b")));
  EXPECT_FALSE(bin->encode("  a  b ") == bin->encode("a b"));
  EXPECT_EQ(spm->decode(spm->encode("  a  b ")), "a b");
  // Only ASCII spaces: a tab or newline run is kept (as <0x09> / <0x0A> byte pieces).
  EXPECT_EQ(spm->decode(spm->encode("a\t\tb\n\nc")), "a\t\tb\n\nc");
  const auto llama = SentencePieceTokenizer::load(test::data_path("tokenizers/llama2/tokenizer.model"));
  EXPECT_FALSE(llama->encode("a  b") == llama->encode("a b"));
}

TEST(SentencePiece, Tok512BinAndModelAgreeOnAllTinyStories) {
  const auto spm = SentencePieceTokenizer::load(test::data_path("models/stories260K/tok512.model"));
  const auto bin = Llama2cTokenizer::load(test::data_path("models/stories260K/tok512.bin"));
  ASSERT_EQ(bin->vocab_size(), spm->vocab_size());
  const auto paragraphs =
      test::split_paragraphs(read_file(test::data_path("text/tinystories/validation-head.txt")));
  ASSERT_GT(paragraphs.size(), 1000u);
  std::size_t tokens = 0, untouched = 0;
  for (std::size_t i = 0; i < paragraphs.size(); ++i) {
    const auto expected = spm->encode(paragraphs[i]);
    tokens += expected.size();
    const std::string normalised = test::normalise_spaces(paragraphs[i]);
    untouched += normalised == paragraphs[i];
    ASSERT_TRUE(test::ids_equal(bin->encode(normalised), expected, spm.get()))
        << "paragraph " << i << ": '" << paragraphs[i] << "'";
  }
  EXPECT_GT(tokens, 100000u);
  // Most paragraphs need no normalisation, and there the raw texts agree (3,366 of 4,300 when
  // written; the others mostly end in a space, which tok512.bin turns into an extra token).
  EXPECT_GT(untouched, paragraphs.size() / 2) << untouched << " of " << paragraphs.size();
}

TEST(SentencePiece, Tok512BinAndModelAgreeOnHardStrings) {
  const auto spm = SentencePieceTokenizer::load(test::data_path("models/stories260K/tok512.model"));
  const auto bin = Llama2cTokenizer::load(test::data_path("models/stories260K/tok512.bin"));
  for (const auto& s : kHardStrings) {
    EXPECT_TRUE(test::ids_equal(bin->encode(test::normalise_spaces(s)), spm->encode(s), spm.get()))
        << "text: '" << s << "'";
  }
  // The emoji really went through byte fallback: 👍 = F0 9F 91 8D -> ids byte + 3.
  const auto ids = spm->encode("👍");
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(std::vector<std::int32_t>(ids.end() - 4, ids.end()),
            (std::vector<std::int32_t>{0xF0 + 3, 0x9F + 3, 0x91 + 3, 0x8D + 3}));
  EXPECT_TRUE(spm->encode("").empty());
  EXPECT_TRUE(bin->encode("").empty());
}

TEST(SentencePiece, Llama2BinAndModelAgreeOnWikiTextAndC4) {
  const auto spm = SentencePieceTokenizer::load(test::data_path("tokenizers/llama2/tokenizer.model"));
  const auto bin = Llama2cTokenizer::load(test::data_path("tokenizers/llama2/tokenizer.bin"));
  ASSERT_EQ(spm->vocab_size(), 32000);
  ASSERT_EQ(bin->vocab_size(), 32000);
  std::vector<std::string> texts = test::read_jsonl_texts(test::data_path("text/wikitext-2-raw-v1/test.rows.jsonl"), 5000);
  const auto c4 = test::read_jsonl_texts(test::data_path("text/c4/c4-en-validation-excerpt-1025.jsonl"), 200);
  texts.insert(texts.end(), c4.begin(), c4.end());
  texts.insert(texts.end(), kHardStrings.begin(), kHardStrings.end());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    ASSERT_TRUE(test::ids_equal(bin->encode(texts[i]), spm->encode(texts[i]), spm.get()))
        << "text " << i << ": '" << texts[i].substr(0, 200) << "'";
  }
}

// SentencePiece's decoder removes the dummy-prefix space, so valid UTF-8 comes back exactly
// with Llama-2's model (no whitespace normalisation), and as normalise_spaces(text) with tok512's.
TEST(SentencePiece, RoundTripsValidUtf8) {
  const auto tok512 = SentencePieceTokenizer::load(test::data_path("models/stories260K/tok512.model"));
  const auto llama = SentencePieceTokenizer::load(test::data_path("tokenizers/llama2/tokenizer.model"));
  const std::string stories = read_file(test::data_path("text/tinystories/validation-head.txt"));
  for (const auto& s : kHardStrings) {
    EXPECT_EQ(llama->decode(llama->encode(s)), s);
    EXPECT_EQ(tok512->decode(tok512->encode(s)), test::normalise_spaces(s));
  }
  std::string back = llama->decode(llama->encode(stories));
  EXPECT_TRUE(back == stories) << "Llama-2: decode(encode(TinyStories)) differs, sizes " << back.size() << " and "
                               << stories.size();
  back = tok512->decode(tok512->encode(stories));
  EXPECT_TRUE(back == test::normalise_spaces(stories)) << "tok512: sizes " << back.size();
  // BOS/EOS are control tokens: they decode to nothing.
  auto ids = tok512->encode("Once upon a time");
  ids.insert(ids.begin(), 1);
  ids.push_back(2);
  EXPECT_EQ(tok512->decode(ids), "Once upon a time");
}

TEST(SentencePiece, UnreadableModelNamesTheFile) {
  test::TempDir dir;
  test::write_bytes(dir / "broken.model", std::string("\x0a\x05hello this is not a sentencepiece model", 40));
  try {
    SentencePieceTokenizer::load(dir / "broken.model");
    FAIL() << "expected qeval::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.model"), std::string::npos) << e.what();
  }
  try {
    SentencePieceTokenizer::load(dir / "missing.model");
    FAIL() << "expected qeval::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.model"), std::string::npos) << e.what();
  }
  const auto spm = SentencePieceTokenizer::load(test::data_path("models/stories260K/tok512.model"));
  EXPECT_THROW(spm->decode({512}), Error);
}

}  // namespace
}  // namespace qeval
