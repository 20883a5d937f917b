// What the llama.cpp fixture tests share (ggml_quants_test.cpp, ggml_importance_test.cpp): the
// fixtures' row generator (tests/oracle/make_ggml_quant_fixtures.py writes the same in Python),
// the stored bytes' decoding and digest, and a comparison that shows the first differing block.
#pragma once

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "quant/formats/ggml/quants.h"

namespace qeval::test {

// Equal bytes, or the first differing block with both blocks in hex and the input's largest |x|.
inline ::testing::AssertionResult bytes_equal(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& expected,
                                       const GgmlQuantType& t, const std::vector<float>* input = nullptr) {
  if (got == expected) return ::testing::AssertionSuccess();
  if (got.size() != expected.size())
    return ::testing::AssertionFailure() << got.size() << " bytes, expected " << expected.size();
  std::size_t first = got.size(), blocks = 0;
  for (std::size_t b = 0; b < got.size() / t.block_bytes; ++b)
    if (std::memcmp(got.data() + b * t.block_bytes, expected.data() + b * t.block_bytes, t.block_bytes) != 0) {
      if (first == got.size()) first = b;
      ++blocks;
    }
  auto hex = [&](const std::vector<std::uint8_t>& v) {
    std::string s;
    for (int i = 0; i < t.block_bytes; ++i) s += fmt::format("{:02x}", v[first * t.block_bytes + i]);
    return s;
  };
  auto out = ::testing::AssertionFailure();
  out << t.name << ": " << blocks << " of " << got.size() / t.block_bytes << " blocks differ; first block " << first
      << "\n  got      " << hex(got) << "\n  expected " << hex(expected);
  if (input) {
    std::string values;
    for (int i = 0; i < t.block_elements && i < 8; ++i)
      values += fmt::format(" {:a}", (*input)[first * t.block_elements + i]);
    out << "\n  input (first 8):" << values;
  }
  return out;
}

// splitmix64, and the fixtures' value rule (tests/oracle/make_ggml_quant_fixtures.py writes the
// same in Python): three 20-bit fields summed, m in (-1.5·2^20, 1.5·2^20), x = m · 2^(e - 20),
// times 8 when the top 4 bits are 0 (an outlier in 16). Every step is exact in float32.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

inline float fixture_value(std::uint64_t u, int scale_exp) {
  std::int64_t m = 0;
  for (int k = 0; k < 3; ++k) m += static_cast<std::int64_t>((u >> (20 * k)) & 0xFFFFF) - 0x80000;
  float x = std::ldexp(static_cast<float>(m), scale_exp - 20);
  if ((u >> 60) == 0) x *= 8.0f;
  return x;
}

// kind: "gauss" (the rule above), "sparse" (zero but for the outliers), "grid" (the low byte
// minus 128, times 2^(e - 7)), "zeros", "const" (every value 0.75·2^e, negated when the seed is odd).
inline std::vector<float> fixture_rows(const std::string& kind, std::uint64_t seed, std::int64_t n, int scale_exp) {
  std::vector<float> x(static_cast<std::size_t>(n));
  SplitMix64 rng{seed};
  for (auto& v : x) {
    const std::uint64_t u = rng.next();
    if (kind == "gauss") {
      v = fixture_value(u, scale_exp);
    } else if (kind == "sparse") {
      v = (u >> 60) == 0 ? fixture_value(u, scale_exp) : 0.0f;
    } else if (kind == "grid") {  // small integers times a power of two: exact products, many ties
      v = std::ldexp(static_cast<float>(static_cast<int>(u & 0xFF) - 128), scale_exp - 7);
    } else if (kind == "zeros") {
      v = 0.0f;
    } else if (kind == "const") {
      v = std::ldexp(seed % 2 ? -0.75f : 0.75f, scale_exp);
    } else {
      ADD_FAILURE() << "unknown fixture kind " << kind;
    }
  }
  return x;
}

// kind: "spread" (1.m·2^e, e in [-20, 20], zero when the top 3 bits are 0), "mild" (1.m·2^e,
// e in {-1, 0}), "blockzeros" (spread, zero on every third run of 16 columns), "ones", "zeros";
// m the low 16 bits. Per-column importance weights, exact in float32.
inline std::vector<float> fixture_importance(const std::string& kind, std::uint64_t seed, std::int64_t n) {
  std::vector<float> w(static_cast<std::size_t>(n));
  SplitMix64 rng{seed};
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t u = rng.next();
    const float mant = 1.0f + static_cast<float>(u & 0xFFFF) / 65536.0f;
    float v = 0.0f;
    if (kind == "ones") {
      v = 1.0f;
    } else if (kind == "zeros") {
      v = 0.0f;
    } else if (kind == "mild") {
      v = std::ldexp(mant, static_cast<int>((u >> 16) % 2) - 1);
    } else if (kind == "spread" || kind == "blockzeros") {
      v = std::ldexp(mant, static_cast<int>((u >> 16) % 41) - 20);
      if (kind == "spread" && (u >> 61) == 0) v = 0.0f;
      if (kind == "blockzeros" && (i / 16) % 3 == 0) v = 0.0f;
    } else {
      ADD_FAILURE() << "unknown importance kind " << kind;
    }
    w[static_cast<std::size_t>(i)] = v;
  }
  return w;
}

inline std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

inline std::string fnv1a64(const std::vector<std::uint8_t>& bytes) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (std::uint8_t b : bytes) h = (h ^ b) * 0x100000001B3ull;
  return fmt::format("{:016x}", h);
}

}  // namespace qeval::test
