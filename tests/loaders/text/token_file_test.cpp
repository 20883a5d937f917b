// Pre-tokenised .bin token files (nanoGPT layout: flat little-endian uint16 / uint32 ids) as
// window sources: windows straight from the ids, dtype detection, and ids >= vocabulary.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "loaders/protocols/protocol.h"
#include "loaders/text/token_file.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

template <typename T>
void write_ids(const std::filesystem::path& file, const std::vector<T>& ids) {
  std::string bytes(ids.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), ids.data(), bytes.size());  // little-endian host, as numpy's tofile
  test::write_bytes(file, bytes);
}

std::vector<Window> drain(WindowSource& s) {
  std::vector<Window> out;
  while (auto w = s.next()) out.push_back(std::move(*w));
  return out;
}

TEST(TokenFile, Uint16WindowsComeStraightFromTheIds) {
  test::TempDir tmp;
  std::vector<std::uint16_t> ids;
  for (int i = 0; i < 1000; ++i) ids.push_back(static_cast<std::uint16_t>((i * 7919) % 50257));
  write_ids(tmp / "val.bin", ids);
  ProtocolSpec spec = ProtocolSpec::defaults_for("windows");
  spec.seq_len = 64;
  WindowSourceOptions options;
  options.vocab_size = 50257;
  auto source = open_window_source(tmp / "val.bin", nullptr, spec, options);
  auto windows = drain(*source);
  ASSERT_EQ(windows.size(), 1000u / 64);
  for (std::size_t w = 0; w < windows.size(); ++w)
    for (std::size_t t = 0; t < 64; ++t)
      ASSERT_EQ(windows[w].tokens[t], ids[w * 64 + t]) << "window " << w << " token " << t;
  EXPECT_EQ(source->facts().at("supply").at("dtype"), "uint16");
  EXPECT_EQ(source->stream_tokens(), 1000);
}

TEST(TokenFile, DtypeByOptionVocabularyOrUpperHalves) {
  test::TempDir tmp;
  write_ids(tmp / "u32.bin", std::vector<std::uint32_t>{5, 9, 100, 7, 3, 1});
  EXPECT_EQ(probe_token_file(tmp / "u32.bin", TokenDtype::auto_, 512).dtype, TokenDtype::uint32);  // upper halves zero
  EXPECT_EQ(probe_token_file(tmp / "u32.bin", TokenDtype::uint16, 512).dtype, TokenDtype::uint16);  // option wins
  write_ids(tmp / "u16.bin", std::vector<std::uint16_t>{5, 9, 100, 7});
  EXPECT_EQ(probe_token_file(tmp / "u16.bin", TokenDtype::auto_, 512).dtype, TokenDtype::uint16);
  EXPECT_EQ(probe_token_file(tmp / "u16.bin", TokenDtype::auto_, 128256).dtype, TokenDtype::uint32);  // Llama-3 vocabulary
  write_ids(tmp / "odd.bin", std::vector<std::uint16_t>{5, 9, 100});
  try {
    probe_token_file(tmp / "odd.bin", TokenDtype::uint32, 512);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("odd.bin"), std::string::npos) << e.what();
  }
}

TEST(TokenFile, IdAtOrAboveVocabularyNamesFileAndOffset) {
  test::TempDir tmp;
  std::vector<std::uint16_t> ids(300, 10);
  ids[257] = 512;  // vocabulary 512: ids 0..511
  write_ids(tmp / "bad.bin", ids);
  ProtocolSpec spec = ProtocolSpec::defaults_for("llamacpp");
  spec.seq_len = 16;
  WindowSourceOptions options;
  options.vocab_size = 512;
  options.token_dtype = TokenDtype::uint16;
  auto source = open_window_source(tmp / "bad.bin", nullptr, spec, options);
  try {
    drain(*source);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.bin"), std::string::npos) << m;
    EXPECT_NE(m.find("token 257"), std::string::npos) << m;
    EXPECT_NE(m.find("byte offset 514"), std::string::npos) << m;
    EXPECT_NE(m.find("id 512"), std::string::npos) << m;
  }
}

TEST(TokenFile, GptqC4NeedsDocuments) {
  test::TempDir tmp;
  write_ids(tmp / "t.bin", std::vector<std::uint16_t>{1, 2, 3, 4});
  WindowSourceOptions options;
  options.vocab_size = 16;
  EXPECT_THROW(open_window_source(tmp / "t.bin", nullptr, ProtocolSpec::defaults_for("gptq-c4"), options), Error);
}

}  // namespace
}  // namespace qeval
