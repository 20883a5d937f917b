// GPT-2 byte-level BPE against expectations derived by hand from the regex and the real
// vocabulary (shared/data/tokenizers/gpt2: OpenAI's encoder.json + vocab.bpe). Expected tokens
// are written as vocabulary strings ("Ġ" = space, "Ċ" = newline, "ĉ" = tab: bytes_to_unicode)
// and looked up in encoder.json; facts about merges that a derivation rests on are asserted
// against vocab.bpe in the test itself, so a wrong derivation fails here, not silently.
#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "common/files.h"
#include "loaders/tokenizers/gpt2_bpe.h"
#include "loaders/tokenizers/gpt2_pretokenize.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

class Gpt2Bpe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path dir = test::data_path("tokenizers/gpt2");
    tok_ = Gpt2BpeTokenizer::from_vocab_and_merges(dir / "encoder.json", dir / "vocab.bpe").release();
    // 0-based merge ranks straight from vocab.bpe (first line "#version: 0.2").
    const std::string merges = read_file(dir / "vocab.bpe");
    std::size_t pos = merges.find('\n') + 1;
    for (int rank = 0; pos < merges.size(); ++rank) {
      const std::size_t end = merges.find('\n', pos);
      const std::string line = merges.substr(pos, end - pos);
      if (!line.empty()) ranks_->emplace(line, rank);
      pos = end == std::string::npos ? merges.size() : end + 1;
    }
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static std::vector<std::int32_t> ids_of(const std::vector<std::string>& symbols) {
    std::vector<std::int32_t> ids;
    for (const auto& s : symbols) {
      const auto id = tok_->token_id(s);
      EXPECT_TRUE(id.has_value()) << "'" << s << "' is not in encoder.json";
      ids.push_back(id.value_or(-1));
    }
    return ids;
  }
  static int rank(const std::string& a, const std::string& b) {
    const auto it = ranks_->find(a + " " + b);
    return it == ranks_->end() ? -1 : it->second;
  }
  static bool in_vocab(const std::string& s) { return tok_->token_id(s).has_value(); }

  static Gpt2BpeTokenizer* tok_;
  static std::map<std::string, int>* ranks_;
};
Gpt2BpeTokenizer* Gpt2Bpe::tok_ = nullptr;
std::map<std::string, int>* Gpt2Bpe::ranks_ = new std::map<std::string, int>();

TEST_F(Gpt2Bpe, VocabularyShapeAndEndOfText) {
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->merge_count(), 50000u);
  // <|endoftext|> is the last encoder.json entry: 50256, used as BOS, EOS and separator.
  EXPECT_EQ(tok_->token_id("<|endoftext|>"), 50256);
  EXPECT_EQ(tok_->eos_id(), 50256);
  EXPECT_EQ(tok_->bos_id(), 50256);
  EXPECT_EQ(tok_->document_separator(), 50256);
  EXPECT_EQ(tok_->kind(), "gpt2-bpe");
}

// Where every regex piece is itself a vocabulary entry, it ends as that one token (the
// entry's own merge chain is in vocab.bpe; the oracle test checks this at scale).
TEST_F(Gpt2Bpe, WordsSpacesAndContractions) {
  // "Hello" (\p{L}+), " world" (" ?\p{L}+").
  EXPECT_TRUE(test::ids_equal(tok_->encode("Hello world"), ids_of({"Hello", "Ġworld"}), tok_));
  // "\s+(?!\S)" on the two spaces before "b" backtracks to one space; the other joins " b".
  EXPECT_TRUE(test::ids_equal(tok_->encode("a  b"), ids_of({"a", "Ġ", "Ġb"}), tok_));
  // Three spaces: pieces "a", "  ", " b"; GPT-2 has no "ĠĠ" token and no "Ġ Ġ" merge, so the
  // two-space piece stays two "Ġ".
  ASSERT_FALSE(in_vocab("ĠĠ"));
  ASSERT_EQ(rank("Ġ", "Ġ"), -1);
  EXPECT_TRUE(test::ids_equal(tok_->encode("a   b"), ids_of({"a", "Ġ", "Ġ", "Ġb"}), tok_));
  // Trailing spaces: the run at the end of the text is one piece "  " (lookahead (?!\S) holds
  // at the end) -> "Ġ", "Ġ". Leading: "  x" -> " " and " x".
  EXPECT_TRUE(test::ids_equal(tok_->encode("end  "), ids_of({"end", "Ġ", "Ġ"}), tok_));
  EXPECT_TRUE(test::ids_equal(tok_->encode("  x"), ids_of({"Ġ", "Ġx"}), tok_));
  // Contractions are their own alternatives, tried first at an apostrophe; the word before
  // them is " ?\p{L}+".
  EXPECT_TRUE(test::ids_equal(tok_->encode("I'm don't they'll we've you'd she's they're"),
                              ids_of({"I", "'m", "Ġdon", "'t", "Ġthey", "'ll", "Ġwe", "'ve", "Ġyou", "'d", "Ġshe", "'s",
                                      "Ġthey", "'re"}),
                              tok_));
  // The contraction alternatives are lower case only: "'T" is "'" (" ?[^\s\p{L}\p{N}]+") then "T".
  EXPECT_TRUE(test::ids_equal(tok_->encode("DON'T"), ids_of({"DON", "'", "T"}), tok_));
  // Punctuation runs: "!!!" is one "[^\s\p{L}\p{N}]+" piece, " ..." another (with its space).
  EXPECT_TRUE(test::ids_equal(tok_->encode("Hello!!! ..."), ids_of({"Hello", "!!!", "Ġ..."}), tok_));
  // "<|endoftext|>" in text is ordinary characters: " <|", "endoftext", "|>" pieces.
  // " <|" -> "Ġ<" "|" and "|>" -> "|" ">" because vocab.bpe has no merge "Ġ< |" or "| >".
  ASSERT_EQ(rank("Ġ<", "|"), -1);
  ASSERT_EQ(rank("|", ">"), -1);
  EXPECT_TRUE(test::ids_equal(tok_->encode(" <|endoftext|>"),
                              ids_of({"Ġ<", "|", "end", "of", "text", "|", ">"}), tok_));
}

TEST_F(Gpt2Bpe, DigitsNeedRealMerges) {
  // " 2023" is one " ?\p{N}+" piece, and "Ġ2023" is not a token. BPE on Ġ 2 0 2 3: the lowest
  // ranked pair is "Ġ 2", then "Ġ2 0" (beats "2 3" and "0 2"), then "2 3" (beats "Ġ20 2"),
  // and there is no "Ġ20 23" merge: result "Ġ20" "23". Then ",", " 3", ".", "14".
  ASSERT_FALSE(in_vocab("Ġ2023"));
  ASSERT_GE(rank("Ġ", "2"), 0);
  EXPECT_LT(rank("Ġ", "2"), rank("2", "0"));
  EXPECT_LT(rank("Ġ2", "0"), rank("2", "3"));
  EXPECT_LT(rank("2", "3"), rank("0", "2"));
  EXPECT_LT(rank("2", "3"), rank("Ġ20", "2"));
  ASSERT_EQ(rank("Ġ20", "23"), -1);
  EXPECT_TRUE(test::ids_equal(tok_->encode("in 2023, 3.14"), ids_of({"in", "Ġ20", "23", ",", "Ġ3", ".", "14"}), tok_));
  // " 1999" is a single token.
  EXPECT_TRUE(test::ids_equal(tok_->encode(" 1999"), ids_of({"Ġ1999"}), tok_));
}

TEST_F(Gpt2Bpe, NewlinesAndTabs) {
  // "line" "1", then "\n\n" before "l": "\s+(?!\S)" takes one "\n", "\s+" the other.
  EXPECT_TRUE(test::ids_equal(tok_->encode("line1\n\nline2\n"),
                              ids_of({"line", "1", "Ċ", "Ċ", "line", "2", "Ċ"}), tok_));
  // "\n\n\n" at the end is one piece; both "Ċ Ċ" pairs have the same rank, the leftmost is
  // merged first, and there is no "ĊĊ Ċ" merge: "ĊĊ" "Ċ" (not "Ċ" "ĊĊ").
  ASSERT_GE(rank("Ċ", "Ċ"), 0);
  ASSERT_EQ(rank("ĊĊ", "Ċ"), -1);
  EXPECT_TRUE(test::ids_equal(tok_->encode("\n\n\n"), ids_of({"ĊĊ", "Ċ"}), tok_));
  // Tabs are whitespace like spaces but never the optional " " prefix: "a", "\t", "\t", "b".
  EXPECT_TRUE(test::ids_equal(tok_->encode("a\t\tb"), ids_of({"a", "ĉ", "ĉ", "b"}), tok_));
}

TEST_F(Gpt2Bpe, NonAsciiLettersAndNumbers) {
  // é (U+00E9, Ll) is a letter, so " café" is one piece; its bytes C3 A9 are "Ã©" and
  // "ĠcafÃ©" is a token. (Were é "other", the result would be "Ġcaf" "Ã©".)
  EXPECT_TRUE(test::ids_equal(tok_->encode(" café"), ids_of({"ĠcafÃ©"}), tok_));
  // "naïve": n a Ã ¯ v e. Ranks: "v e" first, then "n a", then "Ã ¯", then "Ã¯ ve"; no
  // merge joins "na" with "Ã¯ve".
  EXPECT_LT(rank("v", "e"), rank("n", "a"));
  EXPECT_LT(rank("n", "a"), rank("Ã", "¯"));
  EXPECT_LT(rank("Ã", "¯"), rank("Ã¯", "ve"));
  ASSERT_EQ(rank("na", "Ã¯ve"), -1);
  // " Zürich": Ġ Z Ã ¼ r i c h -> "ĠZ", "Ã¼", "rich" ("ri"/"ic"/"ich"/"rich" merge, Ã ¼
  // merges, and neither "ĠZ Ã¼" nor "Ã¼ rich" is a merge).
  ASSERT_EQ(rank("ĠZ", "Ã¼"), -1);
  ASSERT_EQ(rank("Ã¼", "rich"), -1);
  EXPECT_TRUE(test::ids_equal(tok_->encode("naïve Zürich"), ids_of({"na", "Ã¯ve", "ĠZ", "Ã¼", "rich"}), tok_));
  // 你好 are letters (Lo), so " 你好" is one piece: bytes E4 BD A0 E5 A5 BD. Only "ä ½" and
  // "å ¥" are merges among its pairs; "Ġ" stays alone.
  ASSERT_EQ(rank("Ġ", "ä"), -1);
  ASSERT_EQ(rank("Ġ", "ä½"), -1);
  ASSERT_EQ(rank("ä½", "ł"), -1);
  EXPECT_TRUE(test::ids_equal(tok_->encode(" 你好"), ids_of({"Ġ", "ä½", "ł", "å¥", "½"}), tok_));
  // Combining accent U+0301 (Mn) is neither letter nor number: "e" + "\u0301" (CC 81 = "Ì" "ģ").
  EXPECT_TRUE(test::ids_equal(tok_->encode("e\xCC\x81"), ids_of({"e", "Ì", "ģ"}), tok_));
}

TEST_F(Gpt2Bpe, Emoji) {
  // 👍 (U+1F44D, So) is "other": " 👍" is one piece, bytes F0 9F 91 8D = ð Ł ĳ į. Merges:
  // "ð Ł", then "Ġ ðŁ" (beats "ðŁ ĳ"), then "ĠðŁ ĳ"; "ĳ į" is no merge.
  EXPECT_LT(rank("ð", "Ł"), rank("Ġ", "ðŁ"));
  EXPECT_LT(rank("Ġ", "ðŁ"), rank("ðŁ", "ĳ"));
  ASSERT_GE(rank("ĠðŁ", "ĳ"), 0);
  ASSERT_EQ(rank("ĠðŁĳ", "į"), -1);
  EXPECT_TRUE(test::ids_equal(tok_->encode(" 👍"), ids_of({"ĠðŁĳ", "į"}), tok_));
  // Without the space the same bytes give "ðŁĳ" "į", twice: "👍👍" is one piece, and the equal
  // pairs merge leftmost first.
  EXPECT_TRUE(test::ids_equal(tok_->encode("👍👍"), ids_of({"ðŁĳ", "į", "ðŁĳ", "į"}), tok_));
}

// The regex itself, piece by piece, where the Unicode classes decide.
TEST(Gpt2Pretokenize, UnicodeClasses) {
  using V = std::vector<std::string_view>;
  // ² (No) and ½ (No) are numbers: "²" and "!" are separate pieces (as "other" they would join).
  EXPECT_EQ(gpt2_pretokenize("²!"), (V{"²", "!"}));
  EXPECT_EQ(gpt2_pretokenize("3½x"), (V{"3½", "x"}));
  // Arabic-Indic digits (Nd) and Roman numeral Ⅻ (Nl) are numbers too.
  EXPECT_EQ(gpt2_pretokenize("١٢٣!"), (V{"١٢٣", "!"}));
  EXPECT_EQ(gpt2_pretokenize("Ⅻ."), (V{"Ⅻ", "."}));
  // ǅ (Lt) and ª (Lo) are letters; ‿ (Pc) is other.
  EXPECT_EQ(gpt2_pretokenize("ǅªb‿c"), (V{"ǅªb", "‿", "c"}));
  // U+00A0, U+2003, U+3000 are White_Space: runs behave like spaces, but only ASCII " " is
  // the optional prefix of a word.
  EXPECT_EQ(gpt2_pretokenize("a\u00a0\u00a0b"), (V{"a", "\u00a0", "\u00a0", "b"}));
  EXPECT_EQ(gpt2_pretokenize("a\u2003b"), (V{"a", "\u2003", "b"}));
  EXPECT_EQ(gpt2_pretokenize("a\u3000\u3000"), (V{"a", "\u3000\u3000"}));
  // U+200B (Cf) and U+001C (Cc; Python's str.isspace() says yes) are not White_Space: "other".
  EXPECT_EQ(gpt2_pretokenize("a\u200b\u200bb"), (V{"a", "\u200b\u200b", "b"}));
  EXPECT_EQ(gpt2_pretokenize("a\x1c\x1c""b"), (V{"a", "\x1c\x1c", "b"}));
  // A space then a newline run before a word: " \n" (run minus its last char), "\n", "b".
  EXPECT_EQ(gpt2_pretokenize("a \n\nb"), (V{"a", " \n", "\n", "b"}));
  // Apostrophes: a run of "other" swallows the quote; "'s" is only a contraction at its start.
  EXPECT_EQ(gpt2_pretokenize("''s x's"), (V{"''", "s", " x", "'s"}));
  // Invalid UTF-8 bytes are kept, as "other" characters.
  EXPECT_EQ(gpt2_pretokenize("a\xff\xfe b"), (V{"a", "\xff\xfe", " b"}));
  EXPECT_TRUE(gpt2_pretokenize("").empty());
}

TEST_F(Gpt2Bpe, RoundTripsAllOfWikiTextExactly) {
  const std::string text = read_file(test::data_path("text/wikitext-2-raw-v1/test.joined.txt"));
  ASSERT_GT(text.size(), 1000000u);
  const auto ids = tok_->encode(text);
  // Roughly 4 bytes per token on English text; the exact count is the oracle test's business.
  EXPECT_GT(ids.size(), text.size() / 6);
  EXPECT_LT(ids.size(), text.size() / 2);
  const std::string back = tok_->decode(ids);
  ASSERT_EQ(back.size(), text.size());
  EXPECT_TRUE(back == text) << "decode(encode(WikiText)) differs from the text";
  // Arbitrary bytes, invalid UTF-8 included, come back too: BPE works on bytes.
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  bytes += "\xF0\x9F\x91 \xC3\x28 \xED\xA0\x80";
  EXPECT_EQ(tok_->decode(tok_->encode(bytes)), bytes);
}

TEST_F(Gpt2Bpe, DecodeRejectsUnknownIds) {
  EXPECT_EQ(tok_->decode({50256}), "<|endoftext|>");
  try {
    tok_->decode({15496, 50257});
    FAIL() << "expected qeval::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("50257"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("encoder.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok_->decode({-1}), Error);
}

}  // namespace
}  // namespace qeval
