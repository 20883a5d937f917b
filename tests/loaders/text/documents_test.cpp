// Documents: the C4 excerpt through every container, corrupt and malformed inputs, text
// splitting checked against independent splits, and memory that stays flat while a large
// gzip file streams through.
#include "loaders/text/documents.h"

#include <gtest/gtest.h>
#include <zlib.h>
#include <bzlib.h>
#include <zstd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "loaders/text/compressed_stream.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

const char* kC4Jsonl = "text/c4/c4-en-validation-excerpt-1025.jsonl";
const char* kC4Gzip = "text/c4/c4-en-validation-excerpt-1025.json.gz";

std::vector<std::string> read_documents(const fs::path& path, const DocumentOptions& options = {}) {
  auto reader = open_documents(path, options);
  std::vector<std::string> docs;
  while (auto doc = reader->next()) docs.push_back(std::move(*doc));
  return docs;
}

std::string drain(ByteStream& stream) {
  std::string all;
  char chunk[4096];
  while (std::size_t n = stream.read(chunk, sizeof chunk)) all.append(chunk, n);
  return all;
}

// Passes when fn throws qeval::Error whose message holds every one of `parts`.
::testing::AssertionResult throws_with(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& part : parts) {
      if (message.find(part) == std::string::npos) {
        return ::testing::AssertionFailure() << "message lacks \"" << part << "\": " << message;
      }
    }
    return ::testing::AssertionSuccess() << message;
  }
  return ::testing::AssertionFailure() << "no qeval::Error thrown";
}

::testing::AssertionResult same_documents(const std::vector<std::string>& got,
                                          const std::vector<std::string>& expected) {
  if (got.size() != expected.size()) {
    return ::testing::AssertionFailure() << "count: got " << got.size() << ", expected " << expected.size();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected[i]) {
      return ::testing::AssertionFailure() << "document " << i << ": got '" << got[i].substr(0, 120) << "', expected '"
                                           << expected[i].substr(0, 120) << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

void write_gzip(const fs::path& path, const std::string& bytes, const char* mode = "wb6") {
  gzFile f = gzopen(path.c_str(), mode);
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// One zstd frame with a content checksum, so any corruption is detectable.
std::string zstd_frame(const std::string& bytes) {
  ZSTD_CCtx* ctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(ctx, ZSTD_c_compressionLevel, 3);
  ZSTD_CCtx_setParameter(ctx, ZSTD_c_checksumFlag, 1);
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  std::size_t n = ZSTD_compress2(ctx, out.data(), out.size(), bytes.data(), bytes.size());
  ZSTD_freeCCtx(ctx);
  EXPECT_FALSE(ZSTD_isError(n)) << ZSTD_getErrorName(n);
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

// One bzip2 stream (libbz2's one-shot compressor; block size 1 x 100 KB, so a test input spans
// several blocks).
std::string bzip2_stream(const std::string& bytes) {
  std::string out(bytes.size() + bytes.size() / 100 + 600, '\0');
  unsigned n = static_cast<unsigned>(out.size());
  const int ret = BZ2_bzBuffToBuffCompress(out.data(), &n, const_cast<char*>(bytes.data()),
                                           static_cast<unsigned>(bytes.size()), 1, 0, 0);
  EXPECT_EQ(ret, BZ_OK);
  out.resize(ret == BZ_OK ? n : 0);
  return out;
}

std::string gzip_bytes(const fs::path& scratch, const std::string& bytes) {
  write_gzip(scratch, bytes);
  return read_file(scratch);
}

// ---------------------------------------------------------------------------------------------
// The C4 excerpt

TEST(Documents, C4ExcerptIsTheSameAsJsonlGzipAndZstd) {
  const fs::path jsonl = test::data_path(kC4Jsonl);
  const fs::path gz = test::data_path(kC4Gzip);
  test::TempDir dir;
  const fs::path zst = dir / "c4-excerpt.jsonl.zst";
  test::write_bytes(zst, zstd_frame(read_file(jsonl)));

  EXPECT_EQ(open_documents(jsonl)->format(), "jsonl");
  EXPECT_EQ(open_documents(gz)->format(), "jsonl.gz");
  EXPECT_EQ(open_documents(zst)->format(), "jsonl.zst");

  const auto from_jsonl = read_documents(jsonl);
  EXPECT_EQ(from_jsonl.size(), 1025u);
  EXPECT_TRUE(same_documents(read_documents(gz), from_jsonl));
  EXPECT_TRUE(same_documents(read_documents(zst), from_jsonl));

  // Independently: one document per line of the file, each the "text" of that line as
  // nlohmann::json parses it directly.
  const std::string raw = read_file(jsonl);
  EXPECT_EQ(static_cast<std::size_t>(std::count(raw.begin(), raw.end(), '\n')), from_jsonl.size());
  std::istringstream lines(raw);
  std::string line;
  std::vector<std::string> expected;
  while (std::getline(lines, line)) expected.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  EXPECT_TRUE(same_documents(from_jsonl, expected));
  ASSERT_GT(from_jsonl.size(), 500u);
  EXPECT_GT(from_jsonl[500].size(), 0u);
}

TEST(Documents, ConcatenatedGzipMembersAndZstdFramesReadInTurn) {
  const std::string raw = read_file(test::data_path(kC4Jsonl));
  const std::size_t cut = raw.find('\n', raw.size() / 2) + 1;
  test::TempDir dir;
  test::write_bytes(dir / "two.jsonl.gz",
                    gzip_bytes(dir / "a.gz", raw.substr(0, cut)) + gzip_bytes(dir / "b.gz", raw.substr(cut)));
  test::write_bytes(dir / "two.jsonl.zst", zstd_frame(raw.substr(0, cut)) + zstd_frame(raw.substr(cut)));

  const auto expected = read_documents(test::data_path(kC4Jsonl));
  EXPECT_TRUE(same_documents(read_documents(dir / "two.jsonl.gz"), expected));
  EXPECT_TRUE(same_documents(read_documents(dir / "two.jsonl.zst"), expected));
}

// ---------------------------------------------------------------------------------------------
// Corrupt compressed data

TEST(Documents, CorruptGzipNamesTheFileAndWhatZlibSaid) {
  const std::string good = read_file(test::data_path(kC4Gzip));
  test::TempDir dir;

  std::string flipped = good;
  for (std::size_t i = good.size() / 2; i < good.size() / 2 + 16; ++i) flipped[i] = static_cast<char>(~flipped[i]);
  const fs::path bad = dir / "flipped.json.gz";
  test::write_bytes(bad, flipped);
  // Bit flips inside deflate data are caught by inflate or, at the latest, by the CRC-32.
  EXPECT_TRUE(throws_with([&] { drain(*open_byte_stream(bad)); }, {"corrupt gzip data in", bad.string(), "zlib says"}));
  // Through the document reader the garbage may surface as a JSON error first; either way it
  // names the file.
  EXPECT_TRUE(throws_with([&] { read_documents(bad); }, {bad.string()}));

  const fs::path truncated = dir / "truncated.json.gz";
  test::write_bytes(truncated, good.substr(0, good.size() / 2));
  EXPECT_TRUE(throws_with([&] { read_documents(truncated); },
                          {"truncated gzip data in", truncated.string(), std::to_string(good.size() / 2)}));

  const fs::path lost_trailer = dir / "no-trailer.json.gz";
  test::write_bytes(lost_trailer, good.substr(0, good.size() - 4));
  EXPECT_TRUE(throws_with([&] { read_documents(lost_trailer); }, {"truncated gzip data in", lost_trailer.string()}));

  const fs::path empty = dir / "empty.jsonl.gz";
  test::write_bytes(empty, "");
  EXPECT_TRUE(throws_with([&] { read_documents(empty); }, {"truncated gzip data in", empty.string()}));

  const fs::path not_gzip = dir / "plain.jsonl.gz";
  test::write_bytes(not_gzip, "{\"text\": \"not compressed\"}\n");
  EXPECT_TRUE(throws_with([&] { read_documents(not_gzip); }, {"corrupt gzip data in", not_gzip.string(), "header"}));

  const fs::path trailing = dir / "trailing-garbage.json.gz";
  test::write_bytes(trailing, good + "garbage after the member");
  EXPECT_TRUE(throws_with([&] { read_documents(trailing); }, {"corrupt gzip data in", trailing.string()}));
}

TEST(Documents, CorruptZstdNamesTheFileAndWhatZstdSaid) {
  const std::string good = zstd_frame(read_file(test::data_path(kC4Jsonl)));
  test::TempDir dir;

  std::string flipped = good;
  for (std::size_t i = good.size() / 2; i < good.size() / 2 + 16; ++i) flipped[i] = static_cast<char>(~flipped[i]);
  const fs::path bad = dir / "flipped.jsonl.zst";
  test::write_bytes(bad, flipped);
  EXPECT_TRUE(throws_with([&] { drain(*open_byte_stream(bad)); }, {"corrupt zstd data in", bad.string(), "zstd says"}));
  EXPECT_TRUE(throws_with([&] { read_documents(bad); }, {bad.string()}));

  const fs::path truncated = dir / "truncated.jsonl.zst";
  test::write_bytes(truncated, good.substr(0, good.size() / 2));
  EXPECT_TRUE(throws_with([&] { read_documents(truncated); },
                          {"truncated zstd data in", truncated.string(), std::to_string(good.size() / 2)}));

  const fs::path empty = dir / "empty.jsonl.zst";
  test::write_bytes(empty, "");
  EXPECT_TRUE(throws_with([&] { read_documents(empty); }, {"truncated zstd data in", empty.string()}));

  const fs::path not_zstd = dir / "plain.jsonl.zst";
  test::write_bytes(not_zstd, "{\"text\": \"not compressed\"}\n");
  EXPECT_TRUE(throws_with([&] { read_documents(not_zstd); }, {"corrupt zstd data in", not_zstd.string(), "zstd says"}));
}

// bzip2 (llama.cpp's HellaSwag file ships as .bz2): one stream, concatenated streams (as
// pbzip2 writes them), and each kind of damage named with the file and what libbz2 said.
TEST(Documents, Bzip2ReadsAsThePlainFileAndDamageIsNamed) {
  const std::string raw = read_file(test::data_path(kC4Jsonl));
  const std::size_t cut = raw.find('\n', raw.size() / 2) + 1;
  test::TempDir dir;
  const std::string good = bzip2_stream(raw);
  test::write_bytes(dir / "c4.jsonl.bz2", good);
  test::write_bytes(dir / "two.jsonl.bz2", bzip2_stream(raw.substr(0, cut)) + bzip2_stream(raw.substr(cut)));
  EXPECT_EQ(open_documents(dir / "c4.jsonl.bz2")->format(), "jsonl.bz2");
  const auto expected = read_documents(test::data_path(kC4Jsonl));
  EXPECT_TRUE(same_documents(read_documents(dir / "c4.jsonl.bz2"), expected));
  EXPECT_TRUE(same_documents(read_documents(dir / "two.jsonl.bz2"), expected));
  EXPECT_EQ(compression_from_name("x.TXT.BZ2"), Compression::bzip2);

  std::string flipped = good;
  for (std::size_t i = good.size() / 2; i < good.size() / 2 + 16; ++i) flipped[i] = static_cast<char>(~flipped[i]);
  const fs::path bad = dir / "flipped.jsonl.bz2";
  test::write_bytes(bad, flipped);
  EXPECT_TRUE(throws_with([&] { drain(*open_byte_stream(bad)); }, {"corrupt bzip2 data in", bad.string(), "libbz2 says"}));

  const fs::path truncated = dir / "truncated.jsonl.bz2";
  test::write_bytes(truncated, good.substr(0, good.size() / 2));
  EXPECT_TRUE(throws_with([&] { drain(*open_byte_stream(truncated)); },
                          {"truncated bzip2 data in", truncated.string(), std::to_string(good.size() / 2)}));

  const fs::path empty = dir / "empty.jsonl.bz2";
  test::write_bytes(empty, "");
  EXPECT_TRUE(throws_with([&] { drain(*open_byte_stream(empty)); }, {"truncated bzip2 data in", empty.string()}));

  const fs::path not_bzip2 = dir / "plain.jsonl.bz2";
  test::write_bytes(not_bzip2, "{\"text\": \"not compressed\"}\n");
  EXPECT_TRUE(throws_with([&] { drain(*open_byte_stream(not_bzip2)); },
                          {"corrupt bzip2 data in", not_bzip2.string(), "BZ_DATA_ERROR_MAGIC"}));

  const fs::path trailing = dir / "trailing-garbage.jsonl.bz2";
  test::write_bytes(trailing, good + "garbage");
  EXPECT_TRUE(throws_with([&] { drain(*open_byte_stream(trailing)); }, {"corrupt bzip2 data in", trailing.string()}));
}

// The shared data's HellaSwag file, as shipped: 10,042 tasks of 6 lines.
TEST(Documents, HellaSwagBzip2FileHasItsTasks) {
  const fs::path path = test::data_path("tasks/hellaswag/hellaswag_val_full.txt.bz2");
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent";
  LineReader lines(open_byte_stream(path), 1 << 20);
  std::string line;
  std::uint64_t n = 0;
  while (lines.next(line)) ++n;
  EXPECT_EQ(n, 6u * 10042u);
}

// A frame whose header declares a window of 2^window_log bytes (streamed, so zstd does not
// shrink the window to the content size).
std::string zstd_frame_with_window(const std::string& bytes, int window_log) {
  ZSTD_CCtx* ctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(ctx, ZSTD_c_windowLog, window_log);
  std::string out(ZSTD_compressBound(bytes.size()) + 64, '\0');
  ZSTD_inBuffer in{bytes.data(), bytes.size(), 0};
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  std::size_t r = ZSTD_compressStream2(ctx, &o, &in, ZSTD_e_continue);  // size unknown to the header
  if (!ZSTD_isError(r)) r = ZSTD_compressStream2(ctx, &o, &in, ZSTD_e_end);
  ZSTD_freeCCtx(ctx);
  EXPECT_TRUE(!ZSTD_isError(r) && r == 0) << (ZSTD_isError(r) ? ZSTD_getErrorName(r) : "unflushed");
  out.resize(o.pos);
  return out;
}

// The decoder allocates the window a frame header asks for, so the window is bounded (fuzzing
// found a 3 KB file asking for 2 GiB): 2^27 (zstd's own default limit) decodes, 2^28 is refused
// before anything is allocated, with a message saying how to fix the file.
TEST(Documents, ZstdWindowAboveTheLimitIsRefusedNotAllocated) {
  const std::string text = "{\"text\": \"a window too large\"}\n";
  test::TempDir dir;
  const fs::path ok = dir / "window27.jsonl.zst";
  const std::string frame27 = zstd_frame_with_window(text, 27);
  EXPECT_EQ(ZSTD_getFrameContentSize(frame27.data(), frame27.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  test::write_bytes(ok, frame27);
  EXPECT_EQ(drain(*open_byte_stream(ok)), text);

  const fs::path big = dir / "window28.jsonl.zst";
  test::write_bytes(big, zstd_frame_with_window(text, 28));
  EXPECT_TRUE(throws_with([&] { read_documents(big); }, {big.string(), "window larger than 128 MiB", "--long"}));
}

// ---------------------------------------------------------------------------------------------
// Malformed JSON lines

TEST(Documents, MalformedJsonLinesNameTheFileAndLine) {
  test::TempDir dir;
  auto check = [&](const std::string& name, const std::string& content, std::initializer_list<std::string> parts) {
    const fs::path path = dir / name;
    test::write_bytes(path, content);
    auto reader = open_documents(path);
    EXPECT_EQ(reader->next(), std::optional<std::string>("first")) << name;  // streamed up to the bad line
    const auto result = throws_with(
        [&] {
          while (reader->next()) {
          }
        },
        parts);
    EXPECT_TRUE(result) << name;
    EXPECT_NE(std::string(result.message()).find(path.string()), std::string::npos) << result.message();
  };
  const std::string first = "{\"text\": \"first\"}\n\n";  // line 2 is blank and skipped
  check("unterminated.jsonl", first + "{\"text\": \"abc\"\n", {"line 3", "malformed JSON"});
  check("garbage.jsonl", first + "{\"text\": \"ok\"}\nnot json at all\n", {"line 4", "malformed JSON", "not json"});
  check("array.jsonl", first + "[\"text\", \"x\"]\n", {"line 3", "found a JSON array"});
  check("string.jsonl", first + "\"just a string\"\n", {"line 3", "found a JSON string"});
  check("missing.jsonl", first + "{\"body\": \"x\", \"id\": 3}\n", {"line 3", "\"text\"", "keys: \"body\", \"id\""});
  check("number.jsonl", first + "{\"text\": 5}\n", {"line 3", "found a JSON number"});
  check("null.jsonl", first + "{\"text\": null}", {"line 3", "found a JSON null"});

  // The same through gzip: line numbers are of the decompressed text.
  const fs::path gz = dir / "bad.jsonl.gz";
  write_gzip(gz, first + "{\"text\": \"ok\"}\n{\"text\": tru}\n");
  EXPECT_TRUE(throws_with([&] { read_documents(gz); }, {gz.string(), "line 4", "malformed JSON"}));
}

TEST(Documents, JsonLinesAcceptCrlfBlankLinesAnotherFieldAndNoFinalNewline) {
  test::TempDir dir;
  const fs::path path = dir / "rows.JSON";  // the name decides, case-insensitively
  test::write_bytes(path,
                    "{\"text\": \"a\\nb\", \"body\": \"x\"}\r\n  \r\n{\"text\": \"\", \"body\": \"y\"}\r\n{\"text\": "
                    "\"c\", \"body\": \"z\"}");
  EXPECT_TRUE(same_documents(read_documents(path), {"a\nb", "", "c"}));
  DocumentOptions body;
  body.json_field = "body";
  EXPECT_TRUE(same_documents(read_documents(path, body), {"x", "y", "z"}));
}

// ---------------------------------------------------------------------------------------------
// Plain text

DocumentOptions split(TextSplit s) {
  DocumentOptions o;
  o.text_split = s;
  return o;
}

TEST(Documents, TextSplitsHandWrittenCases) {
  test::TempDir dir;
  auto docs = [&](const std::string& content, TextSplit s) {
    const fs::path path = dir / "t.txt";
    test::write_bytes(path, content);
    return read_documents(path, split(s));
  };
  const std::string runs = "\n\na\nb\n\n\n\nc  \n \t \nd";  // leading blanks, a run, a whitespace line, no final \n
  EXPECT_TRUE(same_documents(docs(runs, TextSplit::paragraph), {"a\nb", "c  ", "d"}));
  EXPECT_TRUE(same_documents(docs(runs, TextSplit::line), {"a", "b", "c  ", "d"}));
  EXPECT_TRUE(same_documents(docs(runs, TextSplit::file), {runs}));

  const std::string crlf = "one\r\ntwo\r\n\r\nthree\r\n";
  EXPECT_TRUE(same_documents(docs(crlf, TextSplit::paragraph), {"one\r\ntwo\r", "three\r"}));
  EXPECT_TRUE(same_documents(docs(crlf, TextSplit::line), {"one\r", "two\r", "three\r"}));
  EXPECT_TRUE(same_documents(docs(crlf, TextSplit::file), {crlf}));

  EXPECT_TRUE(same_documents(docs("x\n\n", TextSplit::paragraph), {"x"}));
  for (TextSplit s : {TextSplit::paragraph, TextSplit::line, TextSplit::file}) {
    EXPECT_TRUE(same_documents(docs("", s), {})) << to_string(s);
    EXPECT_TRUE(same_documents(docs("\n", s),
                               s == TextSplit::file ? std::vector<std::string>{"\n"} : std::vector<std::string>{}))
        << to_string(s);
  }

  // Compressed text is text too.
  const fs::path gz = dir / "runs.txt.gz";
  write_gzip(gz, runs);
  EXPECT_EQ(open_documents(gz)->format(), "text.gz");
  EXPECT_TRUE(same_documents(read_documents(gz), {"a\nb", "c  ", "d"}));
  const fs::path zst = dir / "runs.md.zst";
  test::write_bytes(zst, zstd_frame(runs));
  EXPECT_EQ(open_documents(zst)->format(), "text.zst");
  EXPECT_TRUE(same_documents(read_documents(zst, split(TextSplit::line)), {"a", "b", "c  ", "d"}));
}

TEST(Documents, TinyStoriesParagraphsMatchAnIndependentSplit) {
  const fs::path path = test::data_path("text/tinystories/validation-head.txt");
  const std::string raw = read_file(path);

  // Independently: cut the whole file at every "newline, blank lines, newline" with a regex.
  const std::regex separator("\n(?:[ \t\r]*\n)+");
  std::vector<std::string> expected;
  for (std::sregex_token_iterator it(raw.begin(), raw.end(), separator, -1), end; it != end; ++it) {
    std::string piece = *it;
    if (!piece.empty() && piece.back() == '\n') piece.pop_back();  // a file ending in one '\n'
    if (piece.find_first_not_of(" \t\r\n") != std::string::npos) expected.push_back(piece);
  }
  const auto paragraphs = read_documents(path, split(TextSplit::paragraph));
  EXPECT_GT(paragraphs.size(), 1000u);
  EXPECT_TRUE(same_documents(paragraphs, expected));

  std::size_t non_blank_lines = 0;
  std::istringstream lines(raw);
  std::string line;
  while (std::getline(lines, line)) non_blank_lines += std::regex_search(line, std::regex("[^ \t\r]")) ? 1 : 0;
  EXPECT_EQ(read_documents(path, split(TextSplit::line)).size(), non_blank_lines);

  EXPECT_TRUE(same_documents(read_documents(path, split(TextSplit::file)), {raw}));
}

TEST(Documents, OverlongLinesAndDocumentsAreAnErrorNotACrash) {
  test::TempDir dir;
  const fs::path path = dir / "long.txt";
  test::write_bytes(path, "short\n" + std::string(150, 'x') + "\n");
  DocumentOptions small = split(TextSplit::line);
  small.max_document_bytes = 100;
  EXPECT_TRUE(throws_with([&] { read_documents(path, small); }, {path.string(), "line 2", "limit of 100 bytes"}));

  const fs::path para = dir / "para.txt";
  test::write_bytes(para, std::string(60, 'a') + "\n" + std::string(60, 'b') + "\n\nend\n");
  small.text_split = TextSplit::paragraph;
  EXPECT_TRUE(throws_with([&] { read_documents(para, small); }, {para.string(), "line 2", "limit of 100 bytes"}));
  small.text_split = TextSplit::file;
  EXPECT_TRUE(throws_with([&] { read_documents(para, small); }, {para.string(), "100 bytes"}));

  const fs::path jsonl = dir / "long.jsonl";
  test::write_bytes(jsonl, "{\"text\": \"" + std::string(200, 'y') + "\"}\n");
  EXPECT_TRUE(throws_with([&] { read_documents(jsonl, small); }, {jsonl.string(), "line 1", "limit of 100 bytes"}));
}

TEST(Documents, MissingFileAndSplitNames) {
  EXPECT_TRUE(throws_with([] { open_documents("/nonexistent/qeval/data.jsonl.gz"); },
                          {"/nonexistent/qeval/data.jsonl.gz", "cannot open"}));
  for (TextSplit s : {TextSplit::paragraph, TextSplit::line, TextSplit::file}) {
    EXPECT_EQ(parse_text_split(to_string(s)), s);
  }
  EXPECT_EQ(to_string(TextSplit::paragraph), "paragraph");
  EXPECT_TRUE(throws_with([] { parse_text_split("sentence"); }, {"sentence", "paragraph", "line", "file"}));
}

// ---------------------------------------------------------------------------------------------
// Streaming: memory stays flat while far more data than the buffers passes through.

std::size_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;  // reported in kB
  }
  ADD_FAILURE() << "no VmRSS in /proc/self/status";
  return 0;
}

// Deterministic, varied text for document i (so gzip cannot shrink it to nothing).
std::string synthetic_document(std::size_t i) {
  static const char* words[] = {"model", "quantised", "outlier", "kurtosis",   "attention",  "sink",      "token",
                                "layer", "scale",     "int8",    "perplexity", "\"quoted\"", "tab\there", "é"};
  std::string doc = "document " + std::to_string(i) + ":";
  std::uint64_t state = i * 0x9E3779B97F4A7C15ull + 1;
  while (doc.size() < 1000) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    doc += ' ';
    doc += words[state % (sizeof(words) / sizeof(words[0]))];
  }
  return doc;
}

TEST(Documents, LargeGzipStreamsInBoundedMemory) {
  test::TempDir dir;
  const fs::path path = dir / "large.jsonl.gz";
  constexpr std::size_t kDocuments = 50000;  // about 50 MB of JSON lines
  std::size_t json_bytes = 0;
  {
    gzFile f = gzopen(path.c_str(), "wb1");
    ASSERT_NE(f, nullptr);
    for (std::size_t i = 0; i < kDocuments; ++i) {
      const std::string line = nlohmann::json{{"text", synthetic_document(i)}, {"id", i}}.dump() + "\n";
      json_bytes += line.size();
      ASSERT_EQ(gzwrite(f, line.data(), static_cast<unsigned>(line.size())), static_cast<int>(line.size()));
    }
    ASSERT_EQ(gzclose(f), Z_OK);
  }
  ASSERT_GT(json_bytes, 50u * 1000 * 1000);
  ASSERT_GT(json_bytes, 40 * LineReader::kDefaultBufferBytes);

  auto reader = open_documents(path);
  const std::size_t before = resident_bytes();
  std::size_t peak = before;
  std::size_t count = 0;
  while (auto doc = reader->next()) {
    if (*doc != synthetic_document(count)) {
      ADD_FAILURE() << "document " << count << ": got '" << doc->substr(0, 80) << "', expected '"
                    << synthetic_document(count).substr(0, 80) << "'";
      break;
    }
    if (++count % 1000 == 0) peak = std::max(peak, resident_bytes());
  }
  EXPECT_EQ(count, kDocuments);
  const std::size_t growth = peak - before;
  EXPECT_LT(growth, std::size_t{32} << 20)
      << "resident memory grew by " << growth << " bytes while reading " << json_bytes << " bytes of JSON lines";
  std::cout << "[ streamed ] " << json_bytes << " bytes of JSON lines, resident memory grew by " << growth
            << " bytes\n";
}

}  // namespace
}  // namespace qeval
