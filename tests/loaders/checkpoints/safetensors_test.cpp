// safetensors reader and writer: round trips of every dtype, the byte layout checked by hand,
// a file written by the Python safetensors library read against its own header, and corrupt
// files that must each raise qeval::Error naming the file and the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/safetensors.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using nlohmann::json;

// Passes when f() throws qeval::Error whose message contains every part.
// A safetensors file made by hand (no validation), for corrupt inputs.
std::string craft(const json& header, const std::string& data) {
  const std::string text = header.dump();
  std::string out(8, '\0');
  const std::uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  return out + text + data;
}

std::string le_u64(std::uint64_t v) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &v, 8);
  return out;
}

TEST(Safetensors, RoundTripsEveryDtypeWithMetadata) {
  test::TempDir dir;
  at::manual_seed(1);
  std::map<std::string, at::Tensor> tensors{
      {"f32", at::randn({3, 5})},
      {"f32_transposed", at::randn({4, 6}).t()},  // not contiguous: written in logical order
      {"f16", at::randn({7}).to(at::kHalf)},
      {"bf16", at::randn({2, 2, 2}).to(at::kBFloat16)},
      {"f64", at::randn({3}, at::kDouble)},
      {"i64", at::arange(-5, 5, at::kLong)},
      {"i32", at::arange(-3, 3, at::kInt).reshape({2, 3})},
      {"i16", at::arange(0, 4, at::kShort)},
      {"i8", at::arange(-128, 128, at::kChar)},
      {"u8", at::arange(0, 256, at::kInt).to(at::kByte)},
      {"bool", at::tensor({1, 0, 1}, at::kInt).to(at::kBool)},
      {"scalar", at::full({}, 2.5f)},
      {"empty", at::empty({0, 3})},
  };
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"step", "1200"}};
  write_safetensors(dir / "t.safetensors", tensors, metadata);
  SafetensorsFile file(dir / "t.safetensors");
  EXPECT_EQ(file.metadata(), metadata);
  EXPECT_EQ(file.names().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(test::tensors_equal(file.read(name), t));
  }
  EXPECT_EQ(file.info("bf16").dtype, "BF16");
  EXPECT_EQ(file.info("u8").dtype, "U8");
  EXPECT_EQ(read_safetensors(dir / "t.safetensors").size(), tensors.size());
}

TEST(Safetensors, ConvertsHalfAndBFloat16ToFloat32OnRequest) {
  test::TempDir dir;
  at::Tensor half = at::randn({4, 3}).to(at::kHalf), bf16 = at::randn({5}).to(at::kBFloat16);
  write_safetensors(dir / "h.safetensors", {{"h", half}, {"b", bf16}, {"ids", at::arange(3)}});
  SafetensorsFile file(dir / "h.safetensors");
  EXPECT_TRUE(test::tensors_equal(file.read_float32("h"), half.to(at::kFloat)));
  EXPECT_TRUE(test::tensors_equal(file.read_float32("b", {5}), bf16.to(at::kFloat)));
  EXPECT_TRUE(test::throws_with([&] { file.read_float32("ids"); }, {"h.safetensors", "ids", "dtype I64", "floating-point"}));
  EXPECT_TRUE(test::throws_with([&] { file.read_float32("h", {3, 4}); }, {"h.safetensors", "shape [4, 3], expected [3, 4]"}));
  EXPECT_TRUE(test::throws_with([&] { file.read("missing"); }, {"h.safetensors", "missing tensor missing"}));
  EXPECT_TRUE(test::throws_with([&] { read_safetensors(dir / "h.safetensors", /*to_float32=*/true); }, {"dtype I64"}));
}

// The writer's bytes, checked against the format description rather than our reader.
TEST(Safetensors, WriterFollowsTheFormatByteForByte) {
  test::TempDir dir;
  at::Tensor a = at::tensor({1.0f, 2.0f, 3.0f}), b = at::tensor({7}, at::kLong);
  write_safetensors(dir / "w.safetensors", {{"b", b}, {"a", a}}, {{"k", "v"}});
  const std::string bytes = read_file(dir / "w.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // padded with spaces, as the reference writer does
  ASSERT_EQ(bytes.size(), 8 + n + 12 + 8);
  const json header = json::parse(bytes.substr(8, n));
  EXPECT_EQ(header.at("__metadata__"), (json{{"k", "v"}}));
  EXPECT_EQ(header.at("a"), (json{{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 12}}}));
  EXPECT_EQ(header.at("b"), (json{{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {12, 20}}}));
  float floats[3];
  std::memcpy(floats, bytes.data() + 8 + n, 12);
  EXPECT_EQ(floats[2], 3.0f);
  std::int64_t seven = 0;
  std::memcpy(&seven, bytes.data() + 8 + n + 12, 8);
  EXPECT_EQ(seven, 7);
}

// reference.safetensors was written by the Python safetensors library; each tensor must be
// the bytes its header points at.
TEST(Safetensors, ReadsAFileWrittenByTheReferenceLibrary) {
  const auto path = test::data_path("fixtures/tiny-gpt2-hf/reference.safetensors");
  const std::string bytes = read_file(path);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const json header = json::parse(bytes.substr(8, n));
  SafetensorsFile file(path);
  EXPECT_EQ(file.names().size(), 5u);
  for (const auto& name : {"input_ids", "logits_softmax", "hidden_softmax1"}) {
    SCOPED_TRACE(name);
    const auto begin = header[name]["data_offsets"][0].get<std::uint64_t>();
    const auto end = header[name]["data_offsets"][1].get<std::uint64_t>();
    at::Tensor t = file.read(name);
    EXPECT_EQ(t.sizes().vec(), header[name]["shape"].get<std::vector<std::int64_t>>());
    ASSERT_EQ(static_cast<std::uint64_t>(t.numel() * t.element_size()), end - begin);
    EXPECT_EQ(std::memcmp(t.data_ptr(), bytes.data() + 8 + n + begin, end - begin), 0);
  }
  EXPECT_EQ(file.info("input_ids").scalar_type, at::kLong);
}

TEST(SafetensorsBadInput, TruncatedFile) {
  test::TempDir dir;
  const std::string real = read_file(test::data_path("fixtures/tiny-gpt2-hf/model.safetensors"));
  test::write_bytes(dir / "half.safetensors", real.substr(0, real.size() / 2));
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "half.safetensors"); },
                          {"half.safetensors", "outside the data area", "truncated"}));
  test::write_bytes(dir / "tiny.safetensors", "abc");
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "tiny.safetensors"); },
                          {"tiny.safetensors", "truncated", "3 bytes"}));
}

TEST(SafetensorsBadInput, HeaderLengthBeyondTheFile) {
  test::TempDir dir;
  std::string real = read_file(test::data_path("fixtures/tiny-gpt2-hf/model.safetensors"));
  real.replace(0, 8, le_u64(real.size()));
  test::write_bytes(dir / "long.safetensors", real);
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "long.safetensors"); },
                          {"long.safetensors", "header length", "beyond the end of the file"}));
  test::write_bytes(dir / "huge.safetensors", le_u64(~0ull) + "{}");
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "huge.safetensors"); }, {"huge.safetensors", "beyond"}));
}

TEST(SafetensorsBadInput, HeaderThatIsNotJsonOrNotAnObject) {
  test::TempDir dir;
  test::write_bytes(dir / "a.safetensors", le_u64(5) + "{\"a\":");
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "a.safetensors"); }, {"a.safetensors", "not valid JSON"}));
  test::write_bytes(dir / "b.safetensors", le_u64(2) + "[]");
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "b.safetensors"); }, {"b.safetensors", "JSON object", "array"}));
  test::write_bytes(dir / "c.safetensors", craft({{"__metadata__", {{"step", 3}}}}, ""));
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "c.safetensors"); }, {"c.safetensors", "__metadata__", "step"}));
}

TEST(SafetensorsBadInput, OffsetsOutOfRange) {
  test::TempDir dir;
  test::write_bytes(dir / "o.safetensors",
                    craft({{"w", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}}}, std::string(8, '\0')));
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "o.safetensors"); },
                          {"o.safetensors", "tensor w", "[8, 16]", "outside the data area of 8 bytes"}));
  test::write_bytes(dir / "r.safetensors",
                    craft({{"w", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 0}}}}}, std::string(8, '\0')));
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "r.safetensors"); }, {"r.safetensors", "tensor w", "begin after end"}));
}

TEST(SafetensorsBadInput, OverlappingTensors) {
  test::TempDir dir;
  test::write_bytes(dir / "x.safetensors",
                    craft({{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                           {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}},
                          std::string(12, '\0')));
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "x.safetensors"); }, {"x.safetensors", "a [0, 8]", "b [4, 12]", "overlap"}));
}

TEST(SafetensorsBadInput, UnknownDtype) {
  test::TempDir dir;
  test::write_bytes(dir / "d.safetensors",
                    craft({{"w", {{"dtype", "F4_E2M1"}, {"shape", {4}}, {"data_offsets", {0, 4}}}}}, std::string(4, '\0')));
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "d.safetensors"); },
                          {"d.safetensors", "tensor w", "unsupported dtype F4_E2M1", "F32, F16, BF16", "F8_E4M3"}));
}

// FP8 tensors (compressed-tensors float-quantized, fine-grained FP8 checkpoints) are read as their
// bytes; read_float32 refuses them (their values need the scales), and the writer stores uint8
// as F8 when asked.
TEST(Safetensors, Fp8DtypesAreReadAsTheirBytes) {
  test::TempDir dir;
  const std::string bytes = {'\x38', '\x7e', '\xc0', '\x01', '\x3c', '\x00'};  // E4M3 1.0, 448, -2, 2^-9; E5M2 1.0, 0
  test::write_bytes(dir / "f8.safetensors",
                    craft({{"e4", {{"dtype", "F8_E4M3"}, {"shape", {2, 2}}, {"data_offsets", {0, 4}}}},
                           {"e5", {{"dtype", "F8_E5M2"}, {"shape", {2}}, {"data_offsets", {4, 6}}}}},
                          bytes));
  SafetensorsFile file(dir / "f8.safetensors");
  EXPECT_EQ(file.info("e4").dtype, "F8_E4M3");
  EXPECT_EQ(file.info("e5").dtype, "F8_E5M2");
  const at::Tensor e4 = file.read("e4"), e5 = file.read("e5");
  ASSERT_EQ(e4.scalar_type(), at::kByte);
  EXPECT_EQ(e4.sizes(), at::IntArrayRef({2, 2}));
  EXPECT_EQ(std::memcmp(e4.data_ptr(), bytes.data(), 4), 0);
  EXPECT_EQ(std::memcmp(e5.data_ptr(), bytes.data() + 4, 2), 0);
  EXPECT_TRUE(test::throws_with([&] { file.read_float32("e4"); },
                                {"f8.safetensors", "tensor e4", "dtype F8_E4M3", "floating-point", "scales"}));
  // Round trip: uint8 written as F8_E4M3 keeps its bytes and its dtype; unnamed uint8 stays U8.
  write_safetensors(dir / "w.safetensors", {{"a", e4}, {"u", e5}}, {}, {{"a", "F8_E4M3"}});
  SafetensorsFile written(dir / "w.safetensors");
  EXPECT_EQ(written.info("a").dtype, "F8_E4M3");
  EXPECT_EQ(written.info("u").dtype, "U8");
  EXPECT_TRUE(at::equal(written.read("a"), e4));
  EXPECT_TRUE(test::throws_with([&] { write_safetensors(dir / "x.safetensors", {{"f", at::zeros({2})}}, {}, {{"f", "F8_E4M3"}}); },
                                {"x.safetensors", "tensor f", "cannot be stored as F8_E4M3"}));
}

TEST(SafetensorsBadInput, ShapeThatDoesNotFitTheSpan) {
  test::TempDir dir;
  test::write_bytes(dir / "s.safetensors",
                    craft({{"w", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 8}}}}}, std::string(8, '\0')));
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "s.safetensors"); },
                          {"s.safetensors", "tensor w spans 8 bytes", "F32", "[3]", "need 12 bytes"}));
  test::write_bytes(dir / "n.safetensors",
                    craft({{"w", {{"dtype", "F32"}, {"shape", {-2}}, {"data_offsets", {0, 8}}}}}, std::string(8, '\0')));
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "n.safetensors"); }, {"n.safetensors", "tensor w", "non-negative"}));
  // A product that overflows 64 bits must not wrap around to a "matching" size.
  test::write_bytes(dir / "big.safetensors",
                    craft({{"w", {{"dtype", "U8"}, {"shape", {1ull << 33, 1ull << 33}}, {"data_offsets", {0, 0}}}}}, ""));
  EXPECT_TRUE(test::throws_with([&] { SafetensorsFile f(dir / "big.safetensors"); }, {"big.safetensors", "tensor w"}));
}

TEST(SafetensorsBadInput, WriterRefusesUnsupportedDtypes) {
  test::TempDir dir;
  EXPECT_TRUE(test::throws_with([&] { write_safetensors(dir / "c.safetensors", {{"z", at::zeros({2}, at::kComplexFloat)}}); },
                          {"c.safetensors", "tensor z"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "c.safetensors"));
}

}  // namespace
}  // namespace qeval
