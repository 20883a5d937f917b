// llama.cpp's quantisation types (quant/formats/ggml/quants.h), checked three ways:
//   * GgmlQuantOracle: against llama.cpp's Python package `gguf` (tests/oracle/ggml_quant_oracle.py):
//     every type gguf.quants.quantize handles (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 in gguf 0.19)
//     byte for byte on >= 1e5 values per type (random blocks over 48 binades, exact rounding
//     ties, zeros, all-equal blocks, huge and tiny values, fp16 and exponent boundaries), and
//     every type's dequantisation bit for bit. Skipped, saying why, without python3 + gguf.
//   * GgmlQuantFixtures: against llama.cpp itself, byte for byte, on rows that
//     tests/oracle/make_ggml_quant_fixtures.py quantised with libggml's ggml_quantize_chunk
//     (llama-cpp-python 0.3.36, llama.cpp 0c1e57098) into tests/quant/fixtures/ggml_quants_llamacpp.json;
//     both sides make the rows from the same integer generator (splitmix64), so only the
//     quantised bytes are stored: 13 KB of them in 110 small cases, and for 36 large cases
//     (17M values in all) a 64-bit digest of the bytes. Every type, the K-quants and IQ4_NL
//     above all.
//   * GgmlQuants: hand-worked rounding rules, the type table, threading and the ATen wrappers.
#include <gtest/gtest.h>

#include <c10/util/Half.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "common/files.h"
#include "kernels/cpu/cpu_isa.h"
#include "quant/formats/ggml/quants.h"
#include "quant/formats/ggml/quants_internal.h"
#include "quant/formats/minifloat.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"  // python_has, oracle_script
#include "tests/quant/ggml_fixture_util.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using test::bytes_equal;
using test::fixture_value;
using test::SplitMix64;
using test::fixture_rows;
using test::fnv1a64;
using test::from_hex;

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<std::uint8_t> quantize(GgmlType t, const std::vector<float>& x, std::int64_t row_length) {
  const GgmlQuantType& q = ggml_quant_type(t);
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / row_length;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * (row_length / q.block_elements) * q.block_bytes));
  quantize_rows_ggml(t, x.data(), out.data(), rows, row_length);
  return out;
}

std::vector<float> dequantize(GgmlType t, const std::vector<std::uint8_t>& blocks) {
  const GgmlQuantType& q = ggml_quant_type(t);
  const std::int64_t n_blocks = static_cast<std::int64_t>(blocks.size()) / q.block_bytes;
  std::vector<float> out(static_cast<std::size_t>(n_blocks * q.block_elements));
  dequantize_rows_ggml(t, blocks.data(), out.data(), n_blocks, q.block_elements);
  return out;
}

::testing::AssertionResult floats_equal(const std::vector<float>& got, const std::vector<float>& expected) {
  if (got.size() != expected.size())
    return ::testing::AssertionFailure() << got.size() << " values, expected " << expected.size();
  std::size_t first = got.size(), count = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (bits_of(got[i]) != bits_of(expected[i])) {
      if (first == got.size()) first = i;
      ++count;
    }
  if (count == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << count << " of " << got.size() << " values differ; first at " << first
                                       << ": got " << fmt::format("0x{:08x} ({})", bits_of(got[first]), got[first])
                                       << ", expected "
                                       << fmt::format("0x{:08x} ({})", bits_of(expected[first]), expected[first]);
}

// ---- inputs ----

// ≥ 1e5 values of 32-value blocks for one type, every block one of: random (scales over 2^-24 ..
// 2^24), exact rounding ties of that type, zeros, all equal, huge (~2^100 and, for the types
// without a min, ~2^126), tiny (~2^-100, 2^-115), the fp16 overflow boundary of the scale, and
// (MXFP4) largest values at and just below powers of two.
std::vector<float> oracle_blocks(GgmlType t, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x;
  auto uniform_int = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto block = [&](auto&& value) {
    for (int j = 0; j < 32; ++j) x.push_back(value(j));
  };
  auto random_block = [&](int scale_exp) {
    SplitMix64 g{rng()};
    block([&](int) { return fixture_value(g.next(), scale_exp); });
  };
  for (int i = 0; i < 1600; ++i) random_block(uniform_int(-24, 24));
  // Ties: every value lands exactly halfway between two codes (or on one) for that type's rule.
  for (int i = 0; i < 1200; ++i) {
    const float u = std::ldexp(1.0f, uniform_int(-12, 12));
    switch (t) {
      case GgmlType::Q8_0:  // d = u: x/d = m + 0.5
        block([&](int j) { return j == 0 ? 127 * u : (static_cast<float>(uniform_int(-127, 126)) + 0.5f) * u; });
        break;
      case GgmlType::Q4_0:  // max = -8u, d = u: x/d in half steps
      case GgmlType::Q5_0: {
        const int half = t == GgmlType::Q4_0 ? 8 : 16;
        const float sign = i % 2 ? 1.0f : -1.0f;
        block([&](int j) {
          return j == 0 ? sign * -static_cast<float>(half) * u : static_cast<float>(uniform_int(-2 * half + 1, 2 * half - 1)) * 0.5f * u;
        });
        break;
      }
      case GgmlType::Q4_1:  // min = a·u, max = min + 15u (31u): (x - min)/d in half steps
      case GgmlType::Q5_1: {
        const int top = t == GgmlType::Q4_1 ? 15 : 31;
        const int a = uniform_int(-20, 20);
        block([&](int j) {
          const int h = j == 0 ? 0 : j == 1 ? 2 * top : uniform_int(0, 2 * top);
          return (static_cast<float>(a) + static_cast<float>(h) * 0.5f) * u;
        });
        break;
      }
      case GgmlType::MXFP4:  // amax = 6u: scale u/2, values in quarter steps of u (ties at 0.25, 0.75, ...)
        block([&](int j) {
          return j == 0 ? (i % 2 ? 6.0f : -6.0f) * u : static_cast<float>(uniform_int(-27, 27)) * 0.25f * u;
        });
        break;
      default:
        random_block(0);
    }
  }
  for (int i = 0; i < 40; ++i) block([](int) { return 0.0f; });
  for (int i = 0; i < 200; ++i) {
    const float c = std::ldexp(static_cast<float>(uniform_int(-1000, 1000)), uniform_int(-30, 20));
    block([&](int) { return c; });
  }
  const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
  for (int i = 0; i < 100; ++i) random_block(100);
  if (!has_min)
    for (int i = 0; i < 50; ++i) {
      SplitMix64 g{rng()};
      block([&](int) { return std::ldexp(static_cast<float>(static_cast<std::int64_t>(g.next() >> 44) - (1 << 19)), 107); });
    }
  for (int i = 0; i < 100; ++i) random_block(-100);
  for (int i = 0; i < 50; ++i) random_block(-115);
  // The fp16 scale's overflow boundary (65504, halfway 65520) and its subnormal range.
  for (float d : {65504.0f, 65519.0f, 65520.0f, 65536.0f, 6.0e-5f, 3.0e-6f, 6.0e-8f, 2.9e-8f}) {
    const float top = t == GgmlType::Q8_0 ? 127 * d : t == GgmlType::Q4_0 ? -8 * d : t == GgmlType::Q5_0 ? -16 * d : 15 * d;
    block([&](int j) { return j == 0 ? top : j == 1 ? 0.0f : top * static_cast<float>(uniform_int(-100, 100)) / 128.0f; });
  }
  // Exponent boundaries: largest |x| a power of two, or the float just below one.
  for (int e = -20; e <= 20; ++e)
    for (float top : {std::ldexp(1.0f, e), std::nextafter(std::ldexp(1.0f, e), 0.0f)})
      block([&](int j) { return j == 5 ? top : top * static_cast<float>(uniform_int(-64, 64)) / 64.0f; });
  while (x.size() < 100000) random_block(uniform_int(-8, 8));
  return x;
}

// ---- hand-worked rules ----

TEST(GgmlQuants, TypeTableMatchesTheReader) {
  const std::vector<std::string> names = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",   "Q2_K",
                                          "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "MXFP4"};
  ASSERT_EQ(ggml_quant_types().size(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    const GgmlQuantType& t = ggml_quant_types()[i];
    EXPECT_EQ(t.name, names[i]);
    EXPECT_EQ(ggml_quant_type_from_name(names[i]), t.type);
    const GgmlBlockSize s = ggml_block_size(static_cast<std::uint32_t>(t.type));  // the GGUF reader's table
    EXPECT_EQ(static_cast<std::uint64_t>(t.block_elements), s.elements) << t.name;
    EXPECT_EQ(static_cast<std::uint64_t>(t.block_bytes), s.bytes) << t.name;
  }
  EXPECT_EQ(ggml_quant_type_from_name("q4_k"), GgmlType::Q4_K);
  EXPECT_EQ(ggml_quant_type(GgmlType::MXFP4).block_bytes, 17);
  EXPECT_TRUE(test::throws_with([] { ggml_quant_type_from_name("q4_k_m"); },
                                {"unknown ggml quantisation type 'q4_k_m'", "Q4_0", "MXFP4"}));
  EXPECT_TRUE(test::throws_with([] { ggml_quant_type(GgmlType::F16); }, {"ggml type 1", "not one qeval quantises to"}));
}

TEST(GgmlQuants, Fp16RoundingIsNearestEven) {
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = rng();
    if (((u >> 23) & 0xff) == 0xff) continue;  // NaN and inf below
    float f;
    std::memcpy(&f, &u, 4);
    ASSERT_EQ(fp32_to_fp16(f), c10::Half(f).x) << fmt::format("{:a}", f);
  }
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7bff);  // below the halfway point
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // the tie goes to even: infinity
  EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(std::nanf("")), 0x7e00);
  EXPECT_EQ(fp32_to_fp16(-std::nanf("")), 0xfe00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);       // halfway to the smallest subnormal: even
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
}

// q8_0's inline (int)roundf equals libm's on random values below 2^23, on every half between
// -300 and 300, next to the halves, and at the edges of its range.
TEST(GgmlQuants, InlineRoundHalfAwayEqualsRoundf) {
  const auto check = [](float v) {
    ASSERT_EQ(ggml_detail::round_half_away_small(v), static_cast<std::int32_t>(std::round(v))) << fmt::format("{:a}", v);
  };
  std::mt19937 rng(12);
  for (int i = 0; i < 400000; ++i) {
    const std::uint32_t u = rng();
    check(static_cast<float>(static_cast<std::int32_t>(u)) * 0x1p-24f);  // |v| < 128, q8_0's range
    check(static_cast<float>(static_cast<std::int32_t>(u >> 8) - (1 << 23)) * 0x1p-1f);  // |v| <= 2^22, halves included
    float f;
    std::memcpy(&f, &u, 4);
    if (std::fabs(f) < 0x1p23f) check(f);
  }
  for (int k = -600; k <= 600; ++k) {
    const float half = static_cast<float>(k) / 2;
    for (const float v : {half, std::nextafter(half, -INFINITY), std::nextafter(half, INFINITY)}) check(v);
  }
  for (const float v : {0.0f, -0.0f, 0x1.fffffep22f, -0x1.fffffep22f, 8388607.5f, -8388607.5f, 0.49999997f, -0.49999997f,
                        127.5f, -127.5f, 0x1p-149f})
    check(v);
  // NaN (an infinite input's v = inf · 0) gives code 0, as trunc_to_int8(roundf(NaN)) does.
  EXPECT_EQ(ggml_detail::round_half_away_small(std::nanf("")), 0);
  EXPECT_EQ(static_cast<int>(ggml_detail::trunc_to_int8(std::round(std::nanf("")))), 0);
}

TEST(GgmlQuants, HandWorkedRoundingRules) {
  {  // Q8_0: amax 127 -> d = 1; ±0.5 and ±2.5 round away from zero
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f, x[1] = 0.5f, x[2] = -0.5f, x[3] = 2.5f, x[4] = -2.5f, x[5] = 0.49999997f;
    const auto q = quantize(GgmlType::Q8_0, x, 32);
    block_q8_0 b;
    std::memcpy(&b, q.data(), sizeof b);
    EXPECT_EQ(b.d, 0x3c00);
    EXPECT_EQ(b.qs[0], 127);
    EXPECT_EQ(b.qs[1], 1);
    EXPECT_EQ(b.qs[2], -1);
    EXPECT_EQ(b.qs[3], 3);
    EXPECT_EQ(b.qs[4], -3);
    EXPECT_EQ(b.qs[5], 0);
  }
  {  // Q4_0: the signed largest -8 -> d = 1 and code = trunc(x + 8.5): ties go up; +8 clamps to 15
    std::vector<float> x(32, 0.0f);
    x[0] = -8.0f, x[1] = 0.5f, x[2] = -0.5f, x[3] = 7.5f, x[16] = 8.0f;
    const auto q = quantize(GgmlType::Q4_0, x, 32);
    block_q4_0 b;
    std::memcpy(&b, q.data(), sizeof b);
    EXPECT_EQ(b.d, 0x3c00);
    EXPECT_EQ(b.qs[0] & 0xF, 0);   // -8
    EXPECT_EQ(b.qs[1] & 0xF, 9);   // 0.5 -> 1 (up)
    EXPECT_EQ(b.qs[2] & 0xF, 8);   // -0.5 -> 0 (up)
    EXPECT_EQ(b.qs[3] & 0xF, 15);  // 7.5 -> 8, clamped to 7
    EXPECT_EQ(b.qs[0] >> 4, 15);   // x[16] = 8 -> 16, clamped
    EXPECT_EQ(b.qs[4] & 0xF, 8);   // 0
  }
  {  // MXFP4: amax 6 -> e = 127 (scale 2^-1 on the doubled grid); ties go towards zero
    std::vector<float> x(32, 0.0f);
    const float in[] = {6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.75f, -3.5f, 7.0f};
    for (std::size_t j = 0; j < std::size(in); ++j) x[j] = in[j];
    const auto q = quantize(GgmlType::MXFP4, x, 32);
    const auto y = dequantize(GgmlType::MXFP4, q);
    EXPECT_EQ(q[0], 127);
    const float expected[] = {6.0f, 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, -0.5f, -3.0f, 6.0f};
    for (std::size_t j = 0; j < std::size(in); ++j) EXPECT_EQ(y[j], expected[j]) << "x = " << in[j];
  }
  {  // IQ4_NL: a block of grid values times 2^-7 comes back exactly
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = std::ldexp(static_cast<float>(kvalues_iq4nl[j % 16]), -7);
    const auto y = dequantize(GgmlType::IQ4_NL, quantize(GgmlType::IQ4_NL, x, 32));
    EXPECT_TRUE(floats_equal(y, x));
  }
  {  // zeros give zeros everywhere (-0 where the scale is -0: Q4_0's 0 / -8, Q6_K's 0 * (q - 32))
    for (const auto& t : ggml_quant_types()) {
      const std::vector<float> x(256, 0.0f);
      for (float y : dequantize(t.type, quantize(t.type, x, 256))) ASSERT_EQ(y, 0.0f) << t.name;
    }
  }
}

TEST(GgmlQuants, Mxfp4TiesDifferFromOcp) {
  // In units of the block scale (amax 6 -> scale 1): llama.cpp's MXFP4 sends a tie to the value
  // nearer zero, OCP's E2M1 (qeval's `mx` scheme, quant/formats/minifloat.h) to the even mantissa.
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const float llama[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f};
  const float ocp[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f};
  std::vector<float> x(32, 0.0f);
  x[31] = 6.0f;
  for (std::size_t j = 0; j < std::size(ties); ++j) x[j] = ties[j];
  const auto y = dequantize(GgmlType::MXFP4, quantize(GgmlType::MXFP4, x, 32));
  const ElementFormat& e2m1 = element_format(ElementType::e2m1);
  for (std::size_t j = 0; j < std::size(ties); ++j) {
    EXPECT_EQ(y[j], llama[j]) << ties[j];
    EXPECT_EQ(round_to_element(ties[j], e2m1), ocp[j]) << ties[j];
  }
}

TEST(GgmlQuants, ErrorsAreSmallOnWeightLikeRows) {
  // Relative RMS error per type on 16 × 1024 weight-like values: a sanity bound (the exactness
  // is the oracle tests' job), ordered as the bits are.
  const std::vector<float> x = fixture_rows("gauss", 99, 16 * 1024, 0);
  // Measured on these rows (heavy-tailed: one value in 16 is 8 times larger): Q8_0 0.0098,
  // Q6_K 0.029, Q5_K 0.052, Q5_1 0.055, Q5_0 0.078, Q4_K 0.104, Q4_1 0.112, IQ4_NL 0.118,
  // Q4_0 0.155, MXFP4 0.162, Q3_K 0.213, Q2_K 0.355; the bounds leave a margin of about 1.3.
  const std::map<std::string, double> bound = {{"Q8_0", 0.013}, {"Q6_K", 0.04}, {"Q5_0", 0.1}, {"Q5_1", 0.075},
                                               {"Q5_K", 0.07}, {"Q4_0", 0.2}, {"Q4_1", 0.15},  {"Q4_K", 0.14},
                                               {"IQ4_NL", 0.155}, {"MXFP4", 0.21}, {"Q3_K", 0.28}, {"Q2_K", 0.46}};
  double sum2 = 0;
  for (float v : x) sum2 += static_cast<double>(v) * v;
  for (const auto& t : ggml_quant_types()) {
    const auto y = dequantize(t.type, quantize(t.type, x, 1024));
    double err2 = 0;
    for (std::size_t i = 0; i < x.size(); ++i) err2 += (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
    const double relative = std::sqrt(err2 / sum2);
    EXPECT_LT(relative, bound.at(t.name)) << t.name;
    RecordProperty(std::string("relative_rms_error_") + t.name, fmt::format("{:.4f}", relative));
  }
}

// The fused AVX-512 Q8_0 and Q4_0 round trips (what quantize_dequantize_ggml runs where the CPU has
// them) give the row functions' float32 bits on every kind of block: random values over 30 binades,
// exact ties of each rounding rule, zero blocks (−0 first among them), constant blocks, the largest
// magnitude as +a and −a in either order, block scales that are fp16 subnormals, that round to the
// largest fp16 or overflow it, float32-subnormal maxima whose reciprocal scale overflows, and
// blocks with NaN or ±inf (which take the row functions).
TEST(GgmlQuants, FusedQ8_0AndQ4_0RoundTripsEqualTheRowFunctions) {
  if (!kernels::cpu::cpu_runs(kernels::cpu::CpuIsa::avx512)) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> blocks;
  auto block = [&](auto value) {
    std::vector<float> b(32);
    for (int j = 0; j < 32; ++j) b[static_cast<std::size_t>(j)] = value(j);
    blocks.push_back(b);
  };
  for (int i = 0; i < 400; ++i) {
    const float magnitude = std::ldexp(1.0f, static_cast<int>(rng() % 30) - 20);
    block([&](int) { return normal(rng) * magnitude; });
  }
  block([](int j) { return j == 0 ? 127.0f : 0.5f + static_cast<float>(j) - 16.0f; });  // Q8_0: d = 1, x.5 ties
  block([](int j) { return j == 0 ? -8.0f : 0.5f * static_cast<float>(j) - 8.0f; });  // Q4_0: d = 1, halves
  block([](int) { return 0.0f; });
  block([](int j) { return j == 0 ? -0.0f : 0.0f; });
  block([](int j) { return j % 2 ? -0.0f : 0.0f; });
  block([](int) { return 3.25f; });
  block([](int) { return -3.25f; });
  block([](int j) { return j == 3 ? 2.0f : j == 20 ? -2.0f : 0.25f * static_cast<float>(j % 7); });
  block([](int j) { return j == 3 ? -2.0f : j == 20 ? 2.0f : 0.25f * static_cast<float>(j % 7); });
  for (const float amax : {127.0f * 0x1p-20f, 127.0f * 0x1p-24f, 127.0f * 65504.0f, 127.0f * 65520.0f, 127.0f * 70000.0f,
                           8.0f * 65520.0f, 8.0f * 0x1p-25f, 1e-40f, 3e-39f, 1e-44f, 3.0e38f})
    block([&](int j) { return j == 5 ? amax : amax * static_cast<float>(j - 16) / 17.0f; });
  for (const float bad : {NAN, INFINITY, -INFINITY})
    for (const int at : {0, 17, 31}) block([&](int j) { return j == at ? bad : 0.1f * static_cast<float>(j); });
  std::vector<float> row;
  for (const auto& b : blocks) row.insert(row.end(), b.begin(), b.end());
  const std::int64_t n = static_cast<std::int64_t>(row.size());

  auto expect_same_bits = [&](void (*quantize)(const float*, void*, std::int64_t),
                              void (*dequantize)(const void*, float*, std::int64_t),
                              void (*fused)(const float*, float*, std::int64_t), std::size_t block_bytes, const char* type) {
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n) / 32 * block_bytes);
    std::vector<float> expected(row.size()), got(row.size());
    quantize(row.data(), bytes.data(), n);
    dequantize(bytes.data(), expected.data(), n);
    fused(row.data(), got.data(), n);
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (std::memcmp(&expected[i], &got[i], sizeof(float)) != 0) {
        ADD_FAILURE() << type << ": value " << i << " (block " << i / 32 << ", x = " << row[i] << "): expected "
                      << expected[i] << ", got " << got[i];
        return;
      }
    }
  };
  expect_same_bits(quantize_row_q8_0, dequantize_row_q8_0, q8_0_round_trip_avx512, sizeof(block_q8_0), "q8_0");
  expect_same_bits(quantize_row_q4_0, dequantize_row_q4_0, q4_0_round_trip_avx512, sizeof(block_q4_0), "q4_0");
}

TEST(GgmlQuants, ThreadedRowsAndTheAtenWrappersEqualRowByRow) {
  const std::int64_t n = 24, k = 512;
  const std::vector<float> x = fixture_rows("gauss", 5, n * k, -4);
  const at::Tensor w = at::from_blob(const_cast<float*>(x.data()), {n, k}, at::kFloat).clone();
  for (const auto& t : ggml_quant_types()) {
    SCOPED_TRACE(t.name);
    std::vector<std::uint8_t> serial(static_cast<std::size_t>(n * k / t.block_elements * t.block_bytes));
    std::vector<float> values(x.size());
    const auto row = [&](std::int64_t r) { return serial.data() + r * k / t.block_elements * t.block_bytes; };
    for (std::int64_t r = 0; r < n; ++r) {
      quantize_rows_ggml(t.type, x.data() + r * k, row(r), 1, k);
      dequantize_rows_ggml(t.type, row(r), values.data() + r * k, 1, k);
    }
    const at::Tensor q = quantize_ggml(w, t.type);
    ASSERT_EQ(q.size(0), n);
    ASSERT_EQ(q.size(1), k / t.block_elements * t.block_bytes);
    EXPECT_EQ(std::memcmp(q.data_ptr<std::uint8_t>(), serial.data(), serial.size()), 0);
    const at::Tensor y = quantize_dequantize_ggml(w.t().contiguous().t(), t.type);  // a strided input too
    EXPECT_TRUE(floats_equal(std::vector<float>(y.data_ptr<float>(), y.data_ptr<float>() + y.numel()), values));
  }
  EXPECT_TRUE(test::throws_with([&] { quantize_dequantize_ggml(w.narrow(1, 0, 480), GgmlType::Q4_K); },
                                {"quantize_dequantize_ggml", "Q4_K", "multiple of 256", "K = 480"}));
  EXPECT_TRUE(test::throws_with([&] { quantize_ggml(w.narrow(1, 0, 40), GgmlType::Q8_0); }, {"Q8_0", "multiple of 32", "K = 40"}));
  EXPECT_TRUE(test::throws_with([&] { quantize_ggml(w.to(at::kDouble), GgmlType::Q8_0); }, {"float32"}));
  std::vector<std::uint8_t> out(64);
  EXPECT_TRUE(test::throws_with([&] { quantize_row_q4_0(x.data(), out.data(), 48); }, {"quantize_row_q4_0", "48 values"}));
}

// ---- against gguf (Python) ----

bool have_gguf(std::string* why) {
  if (test::python_has("gguf") && test::python_has("numpy")) return true;
  *why = "python3 with llama.cpp's 'gguf' package (and numpy) is not available (pip install gguf)";
  return false;
}

std::string shell_quoted(const fs::path& p) { return "'" + p.string() + "'"; }

std::vector<std::uint8_t> read_bytes(const fs::path& p) {
  const std::string s = read_file(p);
  return std::vector<std::uint8_t>(s.begin(), s.end());
}

std::vector<float> read_floats(const fs::path& p) {
  const std::string s = read_file(p);
  std::vector<float> v(s.size() / 4);
  std::memcpy(v.data(), s.data(), v.size() * 4);
  return v;
}

TEST(GgmlQuantOracle, QuantisersAndDequantisersMatchGgufPackage) {
  std::string why;
  if (!have_gguf(&why)) GTEST_SKIP() << why << ": ggml quantiser oracle comparison not run";
  const fs::path script = test::oracle_script("ggml_quant_oracle.py");
  // Which types gguf quantises: asked, not assumed (gguf 0.19: the 32-value types and MXFP4).
  const std::string list_path = (fs::temp_directory_path() / fmt::format("qeval_ggml_types_{}", ::getpid())).string();
  ASSERT_EQ(std::system(("python3 " + shell_quoted(script) + " --quantisable > " + shell_quoted(list_path)).c_str()), 0);
  std::set<std::string> quantisable;
  {
    std::istringstream in(read_file(list_path));
    for (std::string name; in >> name;) quantisable.insert(name);
    fs::remove(list_path);
  }
  for (const char* name : {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4"}) EXPECT_TRUE(quantisable.count(name)) << name;

  test::TempDir dir;
  std::map<std::string, std::vector<float>> inputs;
  std::map<std::string, std::vector<std::uint8_t>> ours;
  std::string names;
  std::uint32_t seed = 2024;
  for (const auto& t : ggml_quant_types()) {
    const std::int64_t row = t.block_elements == 32 ? 32 * 8 : 256 * 2;
    std::vector<float> x = t.block_elements == 32 ? oracle_blocks(t.type, seed++) : fixture_rows("gauss", seed++, 2048 * 256, 0);
    x.resize(x.size() / row * row);
    ours[t.name] = quantize(t.type, x, row);
    test::write_bytes(dir / (std::string(t.name) + ".blocks"), std::string(ours[t.name].begin(), ours[t.name].end()));
    if (quantisable.count(t.name)) {
      test::write_bytes(dir / (std::string(t.name) + ".f32"), std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
      test::write_bytes(dir / (std::string(t.name) + ".row"), std::to_string(row));
    }
    inputs[t.name] = std::move(x);
    names += std::string(" ") + t.name;
  }
  const std::string command = "python3 " + shell_quoted(script) + " " + shell_quoted(dir.path()) + names + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "oracle failed: " << command;
  std::size_t compared_values = 0;
  for (const auto& t : ggml_quant_types()) {
    SCOPED_TRACE(t.name);
    if (quantisable.count(t.name)) {
      EXPECT_GE(inputs[t.name].size(), 100000u);
      EXPECT_TRUE(bytes_equal(ours[t.name], read_bytes(dir / (std::string(t.name) + ".gguf-q")), t, &inputs[t.name]));
      compared_values += inputs[t.name].size();
    }
    EXPECT_TRUE(floats_equal(dequantize(t.type, ours[t.name]), read_floats(dir / (std::string(t.name) + ".gguf-f32"))));
  }
  EXPECT_GE(compared_values, 6 * 100000u);
  RecordProperty("quantised_values_compared", static_cast<int>(compared_values));
}

// ---- against llama.cpp (committed fixtures) ----

TEST(GgmlQuantFixtures, EveryTypeMatchesLlamaCppByteForByte) {
  const fs::path path = test::repo_path("tests/quant/fixtures/ggml_quants_llamacpp.json");
  const nlohmann::json j = nlohmann::json::parse(read_file(path));
  EXPECT_EQ(j.at("llama_cpp_commit").get<std::string>().substr(0, 9), "0c1e57098");
  std::map<std::string, int> stored_cases, digest_cases;
  std::size_t stored_bytes = 0, digest_values = 0;
  for (const auto& c : j.at("cases")) {
    const std::string type = c.at("type");
    const std::int64_t rows = c.at("rows"), row_length = c.at("row_length");
    const std::string kind = c.at("kind");
    SCOPED_TRACE(fmt::format("{} {} {}x{} seed {} scale 2^{}", type, kind, rows, row_length,
                             c.at("seed").get<std::uint64_t>(), c.at("scale_exp").get<int>()));
    const GgmlQuantType& t = ggml_quant_type(ggml_quant_type_from_name(type));
    const std::vector<float> x = fixture_rows(kind, c.at("seed"), rows * row_length, c.at("scale_exp"));
    const std::vector<std::uint8_t> got = quantize(t.type, x, row_length);
    if (c.contains("bytes")) {  // small: every byte, and the first differing block shown
      const std::vector<std::uint8_t> expected = from_hex(c.at("bytes"));
      EXPECT_TRUE(bytes_equal(got, expected, t, &x));
      ++stored_cases[type];
      stored_bytes += expected.size();
    } else {  // large: every byte through a digest of them all
      EXPECT_EQ(got.size(), c.at("n_bytes").get<std::size_t>());
      EXPECT_EQ(fnv1a64(got), c.at("fnv1a64").get<std::string>()) << "the bytes differ from llama.cpp's";
      ++digest_cases[type];
      digest_values += x.size();
    }
  }
  for (const auto& t : ggml_quant_types()) {
    EXPECT_GE(stored_cases[t.name], 8) << t.name;
    EXPECT_GE(digest_cases[t.name], 2) << t.name;
  }
  EXPECT_GT(stored_bytes, 10000u);
  RecordProperty("stored_bytes_compared", static_cast<int>(stored_bytes));
  RecordProperty("values_compared_by_digest", static_cast<int>(digest_values));
}

}  // namespace
}  // namespace qeval
