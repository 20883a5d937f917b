// The GGUF reader reads every type qeval writes (quant/formats/ggml/quants.h): a GGUF holding one tensor
// of each of the 12 types, its blocks made by qeval's quantisers, reads back as those blocks'
// dequantised values, and as llama.cpp's Python package `gguf` reads the same file
// (tests/oracle/gguf_dequant_oracle.py "file" mode), bit for bit; IQ4_NL and MXFP4 included,
// which the reader refused before. The oracle half is skipped, saying why, without python3 + gguf.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>

#include "common/files.h"
#include "loaders/checkpoints/gguf.h"
#include "quant/formats/ggml/quants.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"  // python_has, oracle_script
#include "tests/support/gguf_builder.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

// [rows, 512] weight-like values with a few outliers, deterministic.
at::Tensor weight(std::int64_t rows, std::uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor w = at::randn({rows, 512}, g, at::kFloat) * 0.02;
  w.index_put_({0, 7}, 0.5f);
  w.index_put_({1, at::indexing::Slice(0, 32)}, 0.0f);  // an all-zero block
  return w;
}

fs::path write_all_types(const test::TempDir& dir) {
  test::GgufBuilder g;
  g.string("general.architecture", "llama");
  std::uint64_t seed = 3;
  for (const auto& t : ggml_quant_types()) {
    const at::Tensor q = quantize_ggml(weight(4, seed++), t.type);
    g.raw_tensor(std::string("w.") + t.name, {4, 512}, static_cast<std::uint32_t>(t.type),
                 std::string(reinterpret_cast<const char*>(q.data_ptr<std::uint8_t>()), q.numel()));
  }
  const fs::path path = dir / "types.gguf";
  test::write_bytes(path, g.build());
  return path;
}

TEST(GgufGgmlTypes, ReaderReadsEveryTypeQevalWrites) {
  test::TempDir dir;
  const fs::path path = write_all_types(dir);
  GgufFile f(path);
  std::uint64_t seed = 3;
  for (const auto& t : ggml_quant_types()) {
    SCOPED_TRACE(t.name);
    const std::string name = std::string("w.") + t.name;
    ASSERT_TRUE(f.has_tensor(name));
    EXPECT_EQ(f.tensor(name).type, static_cast<std::uint32_t>(t.type));
    EXPECT_EQ(ggml_type_name(f.tensor(name).type), t.name);
    const at::Tensor got = f.read_float32(name);
    const at::Tensor expected = quantize_dequantize_ggml(weight(4, seed++), t.type);
    ASSERT_EQ(got.sizes(), expected.sizes());
    EXPECT_TRUE(at::equal(got, expected));
  }
}

TEST(GgufGgmlTypes, ReaderMatchesGgufPackageOnEveryTypeQevalWrites) {
  if (!test::python_has("gguf") || !test::python_has("numpy"))
    GTEST_SKIP() << "python3 with llama.cpp's 'gguf' package (and numpy) is not available (pip install gguf): "
                    "GGUF reader comparison not run";
  test::TempDir dir;
  const fs::path path = write_all_types(dir);
  const fs::path out = dir / "oracle.bin";
  const std::string command = "python3 '" + test::oracle_script("gguf_dequant_oracle.py").string() + "' file '" +
                              path.string() + "' '" + out.string() + "' 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const std::string bytes = read_file(out);
  GgufFile f(path);
  std::size_t at = 0, tensors = 0;
  while (at < bytes.size()) {  // frames: u32 name length, name, u32 type, u64 count, float32 values
    std::uint32_t length = 0, type = 0;
    std::uint64_t n = 0;
    std::memcpy(&length, bytes.data() + at, 4);
    const std::string name = bytes.substr(at + 4, length);
    std::memcpy(&type, bytes.data() + at + 4 + length, 4);
    std::memcpy(&n, bytes.data() + at + 8 + length, 8);
    at += 16 + length;
    SCOPED_TRACE(name);
    const at::Tensor got = f.read_float32(name);
    ASSERT_EQ(static_cast<std::uint64_t>(got.numel()), n);
    EXPECT_EQ(std::memcmp(got.data_ptr<float>(), bytes.data() + at, n * 4), 0);
    at += n * 4;
    ++tensors;
  }
  EXPECT_EQ(tensors, ggml_quant_types().size());
}

}  // namespace
}  // namespace qeval
