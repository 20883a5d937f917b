// GGUF block dequantisers (quant/formats/ggml/blocks.h): hand-worked blocks packed from
// the layouts as documented, the dispatch's refusals, and bit-for-bit agreement with llama.cpp's
// Python package `gguf` (tests/oracle/gguf_dequant_oracle.py, gguf.quants.dequantize) on
// seeded random blocks with zero, subnormal, largest, infinite and NaN scales, and on every
// tensor of SmolLM2-135M-Instruct's Q4_1 GGUF when scripts/models has downloaded it. Without
// python3 and the `gguf` package the oracle tests are skipped with the reason.
#include <gtest/gtest.h>

#include <c10/util/Half.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include "common/files.h"
#include "common/model_cache.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/gguf.h"
#include "quant/formats/ggml/blocks.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"  // python_has, oracle_script
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> dequantize(GgmlType type, const std::string& bytes) {
  const GgmlBlockSize s = ggml_block_size(static_cast<std::uint32_t>(type));
  std::vector<float> out(bytes.size() / s.bytes * s.elements);
  dequantize_ggml(static_cast<std::uint32_t>(type), bytes.data(), bytes.size(), out.data(), out.size(), "test");
  return out;
}

// Passes when the float32 bit patterns are identical (NaNs included); otherwise names the
// first differing index (and its block) with both values in hex and decimal.
::testing::AssertionResult bits_equal(const float* got, const float* expected, std::size_t n, std::size_t block) {
  if (n == 0 || std::memcmp(got, expected, n * sizeof(float)) == 0) return ::testing::AssertionSuccess();
  std::size_t first = n, count = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (bits_of(got[i]) != bits_of(expected[i])) {
      if (first == n) first = i;
      ++count;
    }
  return ::testing::AssertionFailure() << count << " of " << n << " values differ; first at index " << first
                                       << " (block " << first / block << ", element " << first % block << "): got "
                                       << fmt::format("0x{:08x} ({})", bits_of(got[first]), got[first]) << ", expected "
                                       << fmt::format("0x{:08x} ({})", bits_of(expected[first]), expected[first]);
}

::testing::AssertionResult bits_equal(const std::vector<float>& got, const std::vector<float>& expected,
                                      std::size_t block) {
  if (got.size() != expected.size())
    return ::testing::AssertionFailure() << got.size() << " values, expected " << expected.size();
  return bits_equal(got.data(), expected.data(), got.size(), block);
}

template <typename Block>
std::string bytes_of(const Block& b) {
  return std::string(reinterpret_cast<const char*>(&b), sizeof b);
}

ggml_half half_bits(float f) { return c10::Half(f).x; }

TEST(GgufDequantize, Fp16ToFp32IsExact) {
  const std::vector<std::pair<ggml_half, std::uint32_t>> cases = {
      {0x0000, 0x00000000}, {0x8000, 0x80000000},  // ±0
      {0x3c00, 0x3f800000}, {0xc000, 0xc0000000},  // 1, -2
      {0x0001, 0x33800000},                        // smallest subnormal 2^-24
      {0x03ff, 0x387fc000},                        // largest subnormal
      {0x0400, 0x38800000},                        // smallest normal 2^-14
      {0x7bff, 0x477fe000}, {0xfbff, 0xc77fe000},  // ±65504
      {0x7c00, 0x7f800000}, {0xfc00, 0xff800000},  // ±inf
      {0x7e00, 0x7fc00000},                        // quiet NaN
      {0x7c01, 0x7f802000},                        // signalling NaN: payload kept, as numpy on x86-64
  };
  for (auto [h, expected] : cases) EXPECT_EQ(bits_of(fp16_to_fp32(h)), expected) << std::hex << h;
  for (std::uint32_t h = 0; h < 0x7c00; ++h)  // every finite positive value against c10::Half
    ASSERT_EQ(bits_of(fp16_to_fp32(static_cast<ggml_half>(h))), bits_of(static_cast<float>(c10::Half(h, c10::Half::from_bits())))) << h;
}

// dequantize_ggml runs in tasks of 64K elements: a tensor of every F16 bit pattern three times over
// and a few more (tasks that end mid-pattern) equals fp16_to_fp32 value by value, and a Q8_0
// tensor of many tasks equals its blocks dequantised one by one.
TEST(GgufDequantize, ThreadedTasksEqualOneBlockAtATime) {
  std::string f16;
  for (std::uint32_t i = 0; i < 3 * 65536 + 5; ++i) {
    const auto h = static_cast<ggml_half>(i * 40503u);  // every pattern, in a scattered order
    f16.append(reinterpret_cast<const char*>(&h), 2);
  }
  const std::vector<float> got = dequantize(GgmlType::F16, f16);
  std::vector<float> expected(got.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ggml_half h;
    std::memcpy(&h, f16.data() + 2 * i, 2);
    expected[i] = fp16_to_fp32(h);
  }
  EXPECT_TRUE(bits_equal(got.data(), expected.data(), got.size(), 1));
  std::mt19937 rng(64);
  std::string q8(34 * 10001, '\0');
  for (char& c : q8) c = static_cast<char>(rng());
  for (std::size_t b = 0; b < 10001; ++b) {  // finite F16 scales (exponent below all ones)
    q8[34 * b + 1] = static_cast<char>(q8[34 * b + 1] & 0x3b);
  }
  const std::vector<float> whole = dequantize(GgmlType::Q8_0, q8);
  for (std::size_t b = 0; b < 10001; b += 997) {
    const std::vector<float> one = dequantize(GgmlType::Q8_0, q8.substr(34 * b, 34));
    EXPECT_TRUE(bits_equal(whole.data() + 32 * b, one.data(), 32, 32)) << "block " << b;
  }
}

TEST(GgufDequantize, HandWorkedBlocks) {
  {  // Q4_0: low nibbles are elements 0..15, high nibbles 16..31; x = d * (q - 8)
    block_q4_0 b{};
    b.d = half_bits(0.5f);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
    const auto y = dequantize(GgmlType::Q4_0, bytes_of(b));
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 8)) << j;
      EXPECT_EQ(y[j + 16], 0.5f * static_cast<float>(7 - j)) << j;
    }
  }
  {  // Q4_1: x = d * q + m
    block_q4_1 b{};
    b.d = half_bits(0.25f);
    b.m = half_bits(-1.0f);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(15 | (j << 4));
    const auto y = dequantize(GgmlType::Q4_1, bytes_of(b));
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 2.75f) << j;
      EXPECT_EQ(y[j + 16], 0.25f * static_cast<float>(j) - 1.0f) << j;
    }
  }
  {  // Q5_0: bit j of qh (a little-endian u32) is the fifth bit of element j; x = d * (q - 16)
    block_q5_0 b{};
    b.d = half_bits(1.0f);
    const std::uint32_t qh = 0x80000001u;  // elements 0 and 31
    std::memcpy(b.qh, &qh, 4);
    const auto y = dequantize(GgmlType::Q5_0, bytes_of(b));
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[1], -16.0f);
    EXPECT_EQ(y[31], 0.0f);
  }
  {  // Q8_0: x = d * qs
    block_q8_0 b{};
    b.d = half_bits(2.0f);
    for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<std::int8_t>(j * 8 - 128);
    const auto y = dequantize(GgmlType::Q8_0, bytes_of(b));
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 2.0f * static_cast<float>(j * 8 - 128)) << j;
  }
  {  // Q4_K: 8 six-bit scales and mins packed as the layout comment draws them
    const std::uint8_t sc[8] = {3, 10, 17, 24, 31, 38, 45, 63}, mn[8] = {60, 55, 50, 45, 40, 35, 1, 0};
    block_q4_K b{};
    for (int j = 0; j < 4; ++j) {
      b.scales[j] = static_cast<std::uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
      b.scales[j + 4] = static_cast<std::uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
      b.scales[j + 8] = static_cast<std::uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
    for (int j = 0; j < 8; ++j) {
      std::uint8_t s = 0, m = 0;
      get_scale_min_k4(j, b.scales, &s, &m);
      EXPECT_EQ(s, sc[j]) << j;
      EXPECT_EQ(m, mn[j]) << j;
    }
    b.d = half_bits(0.5f);
    b.dmin = half_bits(0.25f);
    for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<std::uint8_t>(0x3 | (0xA << 4));  // lo q 3, hi q 10
    const auto y = dequantize(GgmlType::Q4_K, bytes_of(b));
    for (int e = 0; e < 256; ++e) {  // sub-block s = e / 32: even ones from low nibbles
      const int s = e / 32;
      const float q = s % 2 == 0 ? 3.0f : 10.0f;
      EXPECT_EQ(y[e], 0.5f * static_cast<float>(sc[s]) * q - 0.25f * static_cast<float>(mn[s])) << e;
    }
  }
  {  // Q6_K: q6 of element e = e % 64, packed into ql/qh as the layout comment draws it
    block_q6_K b{};
    b.d = half_bits(1.0f);
    for (auto& s : b.scales) s = 1;
    for (int e = 0; e < 256; ++e) {
      const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
      const int q = e % 64;
      const int ql_index = 64 * half + l + (quarter % 2) * 32;
      b.ql[ql_index] = static_cast<std::uint8_t>(b.ql[ql_index] | ((q & 0xF) << (quarter / 2 * 4)));
      b.qh[32 * half + l] = static_cast<std::uint8_t>(b.qh[32 * half + l] | ((q >> 4) << (2 * quarter)));
    }
    const auto y = dequantize(GgmlType::Q6_K, bytes_of(b));
    for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], static_cast<float>(e % 64 - 32)) << e;
  }
}

TEST(GgufDequantize, HandWorkedIq4NlAndMxfp4Blocks) {
  {  // IQ4_NL: x = d * kvalues_iq4nl[nibble], nibbles as Q4_0
    block_iq4_nl b{};
    b.d = half_bits(0.5f);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
    const auto y = dequantize(GgmlType::IQ4_NL, bytes_of(b));
    const int grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 0.5f * static_cast<float>(grid[j])) << j;
      EXPECT_EQ(y[j + 16], 0.5f * static_cast<float>(grid[15 - j])) << j;
    }
  }
  {  // MXFP4: x = 2^(e - 128) * doubled E2M1 value; e = 0 and 1 are float32 subnormals
    const float grid[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (int e : {0, 1, 2, 127, 130, 254, 255}) {
      block_mxfp4 b{};
      b.e = static_cast<std::uint8_t>(e);
      for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
      const auto y = dequantize(GgmlType::MXFP4, bytes_of(b));
      for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], std::ldexp(grid[j], e - 128)) << e << " " << j;
        EXPECT_EQ(y[j + 16], std::ldexp(grid[15 - j], e - 128)) << e << " " << j;
      }
    }
    EXPECT_EQ(e8m0_to_fp32_half(0), std::ldexp(1.0f, -128));
    EXPECT_EQ(e8m0_to_fp32_half(255), std::ldexp(1.0f, 127));
  }
}

TEST(GgufDequantize, RefusesOtherTypesAndWrongSizes) {
  float out[256];
  const std::string bytes(1024, '\0');
  for (auto [type, name] : {std::pair{9u, "Q8_1"}, std::pair{15u, "Q8_K"}, std::pair{16u, "IQ2_XXS"},
                            std::pair{23u, "IQ4_XS"}, std::pair{34u, "TQ1_0"},
                            std::pair{35u, "TQ2_0"}, std::pair{24u, "I8"}, std::pair{28u, "F64"},
                            std::pair{77u, "type 77"}}) {
    const unsigned ggml_type = type;  // clang 14 cannot capture a structured binding
    EXPECT_FALSE(ggml_type_dequantizable(type)) << name;
    EXPECT_TRUE(test::throws_with([&] { dequantize_ggml(ggml_type, bytes.data(), 18, out, 32, "m.gguf: tensor w"); },
                                  {"m.gguf: tensor w", name, "cannot be dequantised", "Q6_K"}));
  }
  EXPECT_TRUE(test::throws_with([&] { dequantize_ggml(2, bytes.data(), 18, out, 48, "t"); },
                                {"t: 48 elements of type Q4_0", "32-element blocks"}));
  EXPECT_TRUE(test::throws_with([&] { dequantize_ggml(2, bytes.data(), 19, out, 32, "t"); },
                                {"t: 32 elements of type Q4_0", "1 blocks of 18 bytes", "19 bytes"}));
  EXPECT_TRUE(test::throws_with([&] { dequantize_ggml(14, bytes.data(), 209, out, 256, "t"); }, {"Q6_K", "209 bytes"}));
  EXPECT_EQ(ggml_block_size(14).bytes, 210u);
  EXPECT_EQ(ggml_block_size(3).elements, 32u);
}

TEST(GgufDequantize, UnalignedBytesGiveTheSameValues) {
  std::mt19937 rng(7);
  std::string bytes(1 + 3 * sizeof(block_q4_K), '\0');
  for (auto& c : bytes) c = static_cast<char>(rng());
  for (std::size_t at = 0; at < 3; ++at)  // keep the scales finite
    std::memcpy(bytes.data() + 1 + at * sizeof(block_q4_K), "\x00\x3c\x00\x38", 4);
  const auto aligned = dequantize(GgmlType::Q4_K, bytes.substr(1));
  std::vector<float> unaligned(aligned.size());
  dequantize_ggml(12, bytes.data() + 1, bytes.size() - 1, unaligned.data(), unaligned.size(), "t");
  EXPECT_TRUE(bits_equal(unaligned, aligned, 256));
}

// ---- against llama.cpp's gguf package ----

bool have_gguf_oracle(std::string* why) {
  if (test::python_has("gguf") && test::python_has("numpy")) return true;
  *why = "python3 with llama.cpp's 'gguf' package (and numpy) is not available (pip install gguf)";
  return false;
}

struct TypeCase {
  GgmlType type;
  const char* name;
  std::vector<std::size_t> scale_offsets;  // fp16 fields (d, and m or dmin) inside one block
};

const std::vector<TypeCase>& type_cases() {
  static const std::vector<TypeCase> cases = {
      {GgmlType::F32, "F32", {}},
      {GgmlType::F16, "F16", {}},
      {GgmlType::BF16, "BF16", {}},
      {GgmlType::Q4_0, "Q4_0", {offsetof(block_q4_0, d)}},
      {GgmlType::Q4_1, "Q4_1", {offsetof(block_q4_1, d), offsetof(block_q4_1, m)}},
      {GgmlType::Q5_0, "Q5_0", {offsetof(block_q5_0, d)}},
      {GgmlType::Q5_1, "Q5_1", {offsetof(block_q5_1, d), offsetof(block_q5_1, m)}},
      {GgmlType::Q8_0, "Q8_0", {offsetof(block_q8_0, d)}},
      {GgmlType::Q2_K, "Q2_K", {offsetof(block_q2_K, d), offsetof(block_q2_K, dmin)}},
      {GgmlType::Q3_K, "Q3_K", {offsetof(block_q3_K, d)}},
      {GgmlType::Q4_K, "Q4_K", {offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)}},
      {GgmlType::Q5_K, "Q5_K", {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)}},
      {GgmlType::Q6_K, "Q6_K", {offsetof(block_q6_K, d)}},
      {GgmlType::IQ4_NL, "IQ4_NL", {offsetof(block_iq4_nl, d)}},
      {GgmlType::MXFP4, "MXFP4", {}},  // an E8M0 byte, not an fp16 scale: random bytes cover all 256
  };
  return cases;
}

// fp16 scales worth covering: zeros, subnormals, the smallest normal, ±65504, ±inf, NaNs
// (signalling ones too: a block's scale always goes through a multiplication, which quietens).
const std::vector<ggml_half> kSpecialHalves = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00,
                                               0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01};

// A typical scale: |x| in [2^-14, 2^1), either sign.
ggml_half typical_half(std::mt19937& rng) {
  const std::uint32_t exponent = 1 + rng() % 16, mantissa = rng() & 0x3ff, sign = rng() & 1;
  return static_cast<ggml_half>((sign << 15) | (exponent << 10) | mantissa);
}

// Seeded blocks of one type: for block types, every pair of special scales (d and m/dmin), an
// all-0x00 and an all-0xff block, then random bytes with a typical (1/2), special (1/4) or
// random 16-bit (1/4) value in each scale. For F32/F16/BF16, random bit patterns and the
// special halves; F16 signalling NaNs are made quiet, because numpy's own float16 -> float32
// conversion keeps their payload on x86-64 (as qeval does) but quietens them where it uses
// hardware conversion (aarch64), so they are no fixed oracle.
std::string random_blocks(const TypeCase& c, std::uint32_t seed, std::size_t n_random) {
  std::mt19937 rng(seed);
  const GgmlBlockSize s = ggml_block_size(static_cast<std::uint32_t>(c.type));
  std::string out;
  auto random_bytes = [&](std::size_t n) {
    std::string b(n, '\0');
    for (auto& ch : b) ch = static_cast<char>(rng() & 0xff);
    return b;
  };
  auto put_half = [](std::string& b, std::size_t at, ggml_half h) { std::memcpy(b.data() + at, &h, 2); };
  if (s.elements == 1) {
    std::string values = random_bytes(n_random * 64 * s.bytes);
    for (std::size_t i = 0; i < kSpecialHalves.size(); ++i) {
      const ggml_half h = kSpecialHalves[i];
      std::string v(s.bytes, '\0');
      if (s.bytes == 4) {
        const float f = fp16_to_fp32(h);
        std::memcpy(v.data(), &f, 4);
      } else {
        std::memcpy(v.data(), &h, 2);
      }
      values += v;
    }
    if (c.type == GgmlType::F16)
      for (std::size_t at = 0; at + 1 < values.size(); at += 2) {
        ggml_half h;
        std::memcpy(&h, values.data() + at, 2);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) put_half(values, at, static_cast<ggml_half>(h | 0x200));
      }
    return values;
  }
  const std::size_t n_scales = c.scale_offsets.size();
  const std::size_t n_special = n_scales == 0   ? 0
                                : n_scales == 1 ? kSpecialHalves.size()
                                                : kSpecialHalves.size() * kSpecialHalves.size();
  for (std::size_t i = 0; i < n_special; ++i) {
    std::string b = random_bytes(s.bytes);
    put_half(b, c.scale_offsets[0], kSpecialHalves[i % kSpecialHalves.size()]);
    if (n_scales == 2) put_half(b, c.scale_offsets[1], kSpecialHalves[i / kSpecialHalves.size()]);
    out += b;
  }
  out += std::string(s.bytes, '\0') + std::string(s.bytes, '\xff');
  for (std::size_t i = 0; i < n_random; ++i) {
    std::string b = random_bytes(s.bytes);
    for (std::size_t at : c.scale_offsets) {
      const std::uint32_t pick = rng() % 4;
      put_half(b, at,
               pick < 2    ? typical_half(rng)
               : pick == 2 ? kSpecialHalves[rng() % kSpecialHalves.size()]
                           : static_cast<ggml_half>(rng() & 0xffff));
    }
    out += b;
  }
  return out;
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

fs::path oracle_script() { return test::oracle_script("gguf_dequant_oracle.py"); }

TEST(GgufDequantOracle, RandomBlocksMatchGgufPackageBitForBit) {
  std::string why;
  if (!have_gguf_oracle(&why)) GTEST_SKIP() << why << ": GGUF dequantisation oracle comparison not run";
  test::TempDir dir;
  std::string names;
  std::map<std::string, std::string> inputs;
  std::uint32_t seed = 1234;
  for (const auto& c : type_cases()) {
    inputs[c.name] = random_blocks(c, seed++, 2000);
    test::write_bytes(dir / (std::string(c.name) + ".bin"), inputs[c.name]);
    names += std::string(" ") + c.name;
  }
  const std::string command =
      "python3 " + quoted(oracle_script()) + " blocks " + quoted(dir.path()) + names + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "oracle failed: " << command;
  for (const auto& c : type_cases()) {
    SCOPED_TRACE(c.name);
    const std::string expected_bytes = read_file(dir / (std::string(c.name) + ".f32"));
    std::vector<float> expected(expected_bytes.size() / 4);
    std::memcpy(expected.data(), expected_bytes.data(), expected.size() * 4);
    const std::vector<float> got = dequantize(c.type, inputs[c.name]);
    EXPECT_GT(got.size(), 2000u);
    EXPECT_TRUE(bits_equal(got, expected, ggml_block_size(static_cast<std::uint32_t>(c.type)).elements));
  }
}

// ${QEVAL_MODEL_DIR:-~/.cache/qeval/models}/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/models)
fs::path smollm2_path() { return *model_handle_path("smollm2-135m"); }

// Reads the oracle's frames ("file" mode) from a pipe.
class OracleStream {
 public:
  explicit OracleStream(const std::string& command) : command_(command), pipe_(popen(command.c_str(), "r")) {}
  ~OracleStream() {
    if (pipe_) pclose(pipe_);
  }
  OracleStream(const OracleStream&) = delete;
  OracleStream& operator=(const OracleStream&) = delete;
  bool ok() const { return pipe_ != nullptr; }
  // Next tensor: false at the end of the stream.
  bool next(std::string* name, std::uint32_t* type, std::vector<float>* values) {
    std::uint32_t length = 0;
    if (std::fread(&length, 4, 1, pipe_) != 1) return false;
    name->assign(length, '\0');
    std::uint64_t n = 0;
    if (std::fread(name->data(), 1, length, pipe_) != length || std::fread(type, 4, 1, pipe_) != 1 ||
        std::fread(&n, 8, 1, pipe_) != 1)
      throw Error("truncated oracle output from " + command_);
    values->resize(n);
    if (std::fread(values->data(), 4, n, pipe_) != n) throw Error("truncated oracle output from " + command_);
    return true;
  }
  int close() {
    const int rc = pclose(pipe_);
    pipe_ = nullptr;
    return rc;
  }

 private:
  std::string command_;
  FILE* pipe_;
};

TEST(GgufDequantOracle, SmolLM2Q4_1MatchesGgufPackageBitForBit) {
  const fs::path model = smollm2_path();
  if (!fs::exists(model))
    GTEST_SKIP() << "SmolLM2-135M-Instruct Q4_1 GGUF not found at " << model
                 << " (scripts/models downloads it; QEVAL_MODEL_DIR overrides the folder): real-model test not run";
  std::string why;
  if (!have_gguf_oracle(&why)) GTEST_SKIP() << why << ": SmolLM2 dequantisation oracle comparison not run";

  GgufFile f(model);
  ASSERT_EQ(f.tensors().size(), 272u);
  OracleStream oracle("python3 " + quoted(oracle_script()) + " file " + quoted(model) + " -");
  ASSERT_TRUE(oracle.ok());
  std::string name;
  std::uint32_t type = 0;
  std::vector<float> expected;
  std::map<std::string, int> types;
  std::size_t tensors = 0, values = 0;
  while (oracle.next(&name, &type, &expected)) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.has_tensor(name));
    const GgufTensorInfo& t = f.tensor(name);
    EXPECT_EQ(t.type, type);
    const at::Tensor got = f.read_float32(name);
    ASSERT_EQ(static_cast<std::size_t>(got.numel()), expected.size());
    ASSERT_TRUE(bits_equal(got.data_ptr<float>(), expected.data(), expected.size(),
                           ggml_block_size(t.type).elements));
    ++types[ggml_type_name(t.type)];
    ++tensors;
    values += expected.size();
  }
  EXPECT_EQ(oracle.close(), 0) << "the oracle failed";
  EXPECT_EQ(tensors, 272u);
  EXPECT_EQ(values, 134515008u);
  EXPECT_EQ(types, (std::map<std::string, int>{{"F32", 61}, {"Q4_1", 210}, {"Q8_0", 1}}));
}

TEST(GgufDequantOracle, SmolLM2Q4_1LoadsAndRecordsWhatWasDequantised) {
  const fs::path model = smollm2_path();
  if (!fs::exists(model))
    GTEST_SKIP() << "SmolLM2-135M-Instruct Q4_1 GGUF not found at " << model
                 << " (scripts/models downloads it; QEVAL_MODEL_DIR overrides the folder): real-model test not run";
  const LoadedCheckpoint ck = load_checkpoint(model);
  EXPECT_EQ(ck.format, "gguf");
  EXPECT_EQ(ck.config.d_model, 576);
  EXPECT_EQ(ck.config.n_layers, 30);
  EXPECT_TRUE(ck.config.tied_embeddings);
  EXPECT_EQ(ck.notes.at("dequantized_from"), (nlohmann::json{{"F32", 61}, {"Q4_1", 210}, {"Q8_0", 1}}));
  EXPECT_NE(ck.notes.at("full_precision").get<std::string>().find("dequantised weights"), std::string::npos);
  // The Q8_0 embedding, spot-checked against its first block by hand.
  GgufFile f(model);
  const GgufTensorInfo& embd = f.tensor("token_embd.weight");
  std::ifstream in(model, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(f.data_offset() + embd.offset));
  block_q8_0 b{};
  in.read(reinterpret_cast<char*>(&b), sizeof b);
  for (int j = 0; j < 32; ++j)
    EXPECT_EQ(ck.weights.token_embedding[0][j].item<float>(), static_cast<float>(b.qs[j]) * fp16_to_fp32(b.d)) << j;
}

}  // namespace
}  // namespace qeval
