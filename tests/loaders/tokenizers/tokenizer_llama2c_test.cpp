// llama2.c tokenizer.bin: reading with bounds, run.c's encode() on a vocabulary built here (the
// expected ids follow step by step from run.c's rules), run.c's decode(), and bad files.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "common/files.h"
#include "loaders/tokenizers/llama2c_tokenizer.h"
#include "loaders/tokenizers/tokenizer.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

struct Entry {
  std::string piece;
  float score;
};

std::string le32(std::int32_t v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}
std::string lef32(float v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}

std::string tokenizer_bin(const std::vector<Entry>& entries, std::int32_t max_len = 16) {
  std::string bytes = le32(max_len);
  for (const auto& e : entries) bytes += lef32(e.score) + le32(static_cast<std::int32_t>(e.piece.size())) + e.piece;
  return bytes;
}

// llama2.c's layout: <unk>, BOS, EOS, 256 byte pieces, then the BPE pieces.
std::vector<Entry> base_vocab() {
  std::vector<Entry> v = {{"<unk>", 0}, {"\n<s>\n", 0}, {"\n</s>\n", 0}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.push_back({name, 0});
  }
  return v;
}

TEST(Llama2cTokenizer, EncodesLikeRunC) {
  auto v = base_vocab();  // ids 0..258
  v.push_back({" ", -5});      // 259
  v.push_back({"a", -5});      // 260
  v.push_back({"b", -5});      // 261
  v.push_back({"ab", -1});     // 262
  v.push_back({" a", -2});     // 263
  v.push_back({"ba", -1});     // 264
  v.push_back({"aba", -0.5f});  // 265
  v.push_back({"é", -5});      // 266
  test::TempDir dir;
  test::write_bytes(dir / "tok.bin", tokenizer_bin(v));
  const auto tok = Llama2cTokenizer::load(dir / "tok.bin");
  ASSERT_EQ(tok->vocab_size(), 267);

  // "abab": dummy " " then characters: [" ", a, b, a, b]. Pair scores: " a" -2, "ab" -1,
  // "ba" -1, "ab" -1: the best is -1, the leftmost of the ties wins -> [" ", ab, a, b].
  // Now "aba" (-0.5) beats "ab" (-1) -> [" ", aba, b]; " aba" and "abab" are not pieces.
  EXPECT_TRUE(test::ids_equal(tok->encode("abab"), {259, 265, 261}));
  // "ba": [" ", b, a] -> "ba" (-1) beats nothing else (" b" is no piece) -> [" ", ba].
  EXPECT_TRUE(test::ids_equal(tok->encode("ba"), {259, 264}));
  // "a": [" ", a] -> " a" (-2) is a piece -> [" a"].
  EXPECT_TRUE(test::ids_equal(tok->encode("a"), {263}));
  // A two-byte character in the vocabulary is one id; one that is not (ü = C3 BC) falls back
  // to its bytes as ids byte + 3. "z" is not a piece either.
  EXPECT_TRUE(test::ids_equal(tok->encode("éüz"), {259, 266, 0xC3 + 3, 0xBC + 3, 'z' + 3}));
  // No text, no dummy prefix.
  EXPECT_TRUE(tok->encode("").empty());
}

TEST(Llama2cTokenizer, DecodesLikeRunC) {
  const auto tok = Llama2cTokenizer::load(test::data_path("models/stories260K/tok512.bin"));
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->piece(1), "\n<s>\n");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->document_separator(), 1);
  const auto ids = tok->encode("Once upon a time");
  // Without BOS the dummy prefix stays; after BOS run.c strips the leading space of the piece.
  EXPECT_EQ(tok->decode(ids), " Once upon a time");
  std::vector<std::int32_t> with_bos = ids;
  with_bos.insert(with_bos.begin(), 1);
  EXPECT_EQ(tok->decode(with_bos), "Once upon a time");
  // "<0x0A>" (id 13) is the newline byte, not its spelling.
  EXPECT_EQ(tok->piece(13), "<0x0A>");
  EXPECT_EQ(tok->decode({13}), "\n");
  EXPECT_THROW(tok->decode({512}), Error);
}

// Round trip: decode(BOS + encode(t)) == t for text that does not start with a space
// (run.c strips the dummy prefix after BOS; a text's own leading space would go too).
TEST(Llama2cTokenizer, RoundTripsTinyStoriesAfterBos) {
  const auto tok = Llama2cTokenizer::load(test::data_path("models/stories260K/tok512.bin"));
  const auto paragraphs =
      test::split_paragraphs(read_file(test::data_path("text/tinystories/validation-head.txt")));
  std::size_t checked = 0;
  for (const auto& p : paragraphs) {
    if (p.front() == ' ') continue;
    auto ids = tok->encode(p);
    ids.insert(ids.begin(), 1);
    ASSERT_EQ(tok->decode(ids), p);
    ++checked;
  }
  EXPECT_GT(checked, 1000u);
  // Emoji and non-ASCII go through byte fallback and come back byte for byte.
  const std::string hard = "café 👍 日本\tx  y";
  auto ids = tok->encode(hard);
  ids.insert(ids.begin(), 1);
  EXPECT_EQ(tok->decode(ids), hard);
}

void expect_error_naming(const std::filesystem::path& path, const std::string& what) {
  try {
    Llama2cTokenizer::load(path);
    ADD_FAILURE() << "expected qeval::Error for " << path;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.filename().string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Llama2cTokenizer, BadFilesNameTheFile) {
  const std::string good = read_file(test::data_path("models/stories260K/tok512.bin"));
  test::TempDir dir;
  // Cut inside the last entry's text, and inside an entry header.
  test::write_bytes(dir / "cut_text.bin", good.substr(0, good.size() - 1));
  expect_error_naming(dir / "cut_text.bin", "truncated");
  test::write_bytes(dir / "cut_header.bin", good.substr(0, 4 + 8 + 5 + 3));  // <unk> entry, then 3 bytes
  expect_error_naming(dir / "cut_header.bin", "truncated");
  test::write_bytes(dir / "empty.bin", "");
  expect_error_naming(dir / "empty.bin", "max_token_length");
  // A length beyond max_token_length, a negative length, and an absurd max_token_length.
  test::write_bytes(dir / "long.bin", tokenizer_bin({{"<unk>", 0}, {"abcdef", 0}}, 5));
  expect_error_naming(dir / "long.bin", "length 6");
  std::string negative = le32(8) + lef32(0) + le32(-5) + "xxxx";
  test::write_bytes(dir / "negative.bin", negative);
  expect_error_naming(dir / "negative.bin", "length -5");
  test::write_bytes(dir / "huge.bin", le32(0x7fffffff) + lef32(0) + le32(1) + "x");
  expect_error_naming(dir / "huge.bin", "max_token_length");
  expect_error_naming(dir / "absent.bin", "absent.bin");
}

}  // namespace
}  // namespace qeval
