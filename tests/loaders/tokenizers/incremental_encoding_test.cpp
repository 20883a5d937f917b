// Incremental encoding (Tokenizer::continuation_cut / encode_continuation): a long text encoded
// piece by piece, cut where each tokenizer says the encoding is exact, gives exactly the ids of
// encoding it whole — on real text (WikiText-2, Tiny Shakespeare) cut every ~2 KiB, for every
// tokenizer family that has a cut rule. This is what lets one window of a 20 MB paragraph cost the
// memory of a 256 KiB piece (loaders/protocols/protocol.cpp, DocumentTokens).
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "common/files.h"
#include "loaders/tokenizers/tokenizer.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

struct Pieces {
  std::vector<std::int32_t> ids;
  int cuts = 0, inexact = 0;
};

// The loop DocumentTokens runs, with a small piece size so that a text gets many cuts.
Pieces encode_in_pieces(const Tokenizer& tok, std::string_view text, std::size_t limit) {
  Pieces out;
  std::size_t offset = 0;
  while (offset < text.size()) {
    const std::string_view rest = text.substr(offset);
    std::size_t take = rest.size();
    if (rest.size() > limit) {
      take = tok.continuation_cut(rest, limit);
      ++out.cuts;
      if (take == 0) {
        ++out.inexact;
        take = limit;
        while (take > 1 && (static_cast<unsigned char>(rest[take]) & 0xC0) == 0x80) --take;
      }
    }
    const auto ids = offset == 0 ? tok.encode(rest.substr(0, take)) : tok.encode_continuation(rest.substr(0, take));
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    offset += take;
  }
  return out;
}

std::string real_text() {
  const std::string wiki = read_file(test::data_path("text/wikitext-2-raw-v1/test.joined.txt")).substr(0, 150000);
  const std::string shakespeare = read_file(test::data_path("text/tinyshakespeare/input.txt")).substr(0, 60000);
  return wiki + "\n" + shakespeare;
}

void expect_exact_in_pieces(const std::string& tokenizer) {
  const auto tok = load_tokenizer(test::data_path(tokenizer));
  const std::string text = real_text();
  const Pieces p = encode_in_pieces(*tok, text, 2048);
  EXPECT_GT(p.cuts, 80) << tokenizer;
  EXPECT_EQ(p.inexact, 0) << tokenizer << ": every cut should be exact on real text";
  EXPECT_TRUE(test::ids_equal(p.ids, tok->encode(text), tok.get())) << tokenizer;
}

TEST(IncrementalEncoding, Llama2cTokenizersAreExactInPieces) {
  expect_exact_in_pieces("models/stories260K/tok512.bin");
  expect_exact_in_pieces("tokenizers/llama2/tokenizer.bin");
}

TEST(IncrementalEncoding, Gpt2BpeIsExactInPieces) { expect_exact_in_pieces("tokenizers/gpt2/encoder.json"); }

TEST(IncrementalEncoding, GgufSpmIsExactInPieces) { expect_exact_in_pieces("models/stories260K/stories260K-tok512-f32.gguf"); }

// Named SentencePiece.* so that the AddressSanitizer run filters it with the other .model tests.
TEST(SentencePiece, IncrementalEncodingIsExactInPieces) {
  expect_exact_in_pieces("models/stories260K/tok512.model");
  expect_exact_in_pieces("tokenizers/llama2/tokenizer.model");
}

// Text without any place to cut exactly (no spaces) is cut at a character boundary: the caller
// counts it, and the pieces still cover the text.
TEST(IncrementalEncoding, TextWithoutExactCutsIsCutAtCharacterBoundaries) {
  const auto tok = load_tokenizer(test::data_path("models/stories260K/tok512.bin"));
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "\xc3\xa9x";  // "éx" repeated, no space
  const Pieces p = encode_in_pieces(*tok, text, 1001);
  EXPECT_GT(p.inexact, 0);
  EXPECT_EQ(tok->decode(p.ids), " " + text);  // the dummy prefix once, every character once
}

}  // namespace
}  // namespace qeval
