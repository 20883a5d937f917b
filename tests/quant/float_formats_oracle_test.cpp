// The floating-point formats (issue 61) against an independent implementation: every element
// code and scale of FP8 (E4M3, E5M2), FP6 (E2M3, E3M2), FP4 (E2M1), OCP MX blocks (floor and
// round-up scales) and NVFP4 equals tests/oracle/float_formats_oracle.py, which casts with
// ml_dtypes and writes the scaling from the definitions in numpy float32. The inputs hold exact
// ties of every element type, its subnormals, values at and beyond its largest finite value,
// float32 subnormals, all-zero blocks and blocks whose amax is a power of two; the counts are
// printed. The fast rounding is also held to the float64 reference rounding on every value.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/files.h"
#include "quant/formats/minifloat.h"
#include "quant/formats/mx.h"
#include "quant/formats/nvfp4.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

constexpr ElementType kTypes[] = {ElementType::e4m3, ElementType::e5m2, ElementType::e2m3, ElementType::e3m2,
                                  ElementType::e2m1};

bool have_oracle(std::string* why) {
  if (test::python_has("ml_dtypes") && test::python_has("numpy")) return true;
  *why = "python3 with ml_dtypes and numpy is not available (pip install ml_dtypes)";
  return false;
}

std::string quoted(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

void run_oracle(const std::string& args) {
  const std::string command = "python3 " + quoted(test::oracle_script("float_formats_oracle.py")) + " " + args + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "oracle failed: " << command;
}

template <typename T>
void write_values(const std::filesystem::path& path, const std::vector<T>& v) {
  test::write_bytes(path, std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
}

template <typename T>
std::vector<T> read_values(const std::filesystem::path& path) {
  const std::string bytes = read_file(path);
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

// Every positive finite value of the type, ascending.
std::vector<float> grid(ElementType t) {
  const ElementFormat& f = element_format(t);
  std::vector<float> g;
  for (int code = 0; code < (1 << (f.bits() - 1)); ++code) {
    const float v = element_value(static_cast<std::uint8_t>(code), t);
    if (v <= f.max_finite) g.push_back(v);
  }
  return g;
}

// A random float32 with exponent in [lo, hi] and a random significand and sign.
float random_float(std::mt19937& rng, int lo, int hi) {
  std::uniform_int_distribution<int> e(lo, hi);
  const std::uint32_t mantissa = rng() & 0x7fffff;
  const std::uint32_t sign = (rng() & 1u) << 31;
  const int ex = e(rng);
  if (ex < -126) return bits_float(sign | (mantissa >> std::min(23, -126 - ex)));  // a float32 subnormal
  return bits_float(sign | (static_cast<std::uint32_t>(ex + 127) << 23) | mantissa);
}

// Values for the element casts: every type's ties, subnormals and values at or past its maximum,
// float32 subnormals, zeros, and random values over a wide range.
std::vector<float> cast_values() {
  std::mt19937 rng(61);
  std::vector<float> v = {0.0f, -0.0f, FLT_MAX, -FLT_MAX, 1e30f, -1e30f, FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN};
  for (ElementType t : kTypes) {
    const std::vector<float> g = grid(t);
    const float max = element_format(t).max_finite;
    for (std::size_t i = 0; i + 1 < g.size(); ++i) {
      const float mid = (g[i] + g[i + 1]) / 2;  // exact: a few significant bits
      for (float x : {mid, g[i], (3 * g[i] + g[i + 1]) / 4, std::nextafter(mid, 0.0f), std::nextafter(mid, FLT_MAX)}) {
        v.push_back(x);
        v.push_back(-x);
      }
    }
    for (float x : {max, std::nextafter(max, FLT_MAX), max * 1.0001f, max * 1.125f, 2 * max, max * 1000})
      v.push_back(x), v.push_back(-x);
  }
  for (int i = 0; i < 2000; ++i) v.push_back(random_float(rng, -160, -127));  // float32 subnormals
  for (int i = 0; i < 100000; ++i) v.push_back(random_float(rng, -24, 20));
  return v;
}

TEST(FloatFormatsOracle, ElementCastsEqualMlDtypes) {
  std::string why;
  if (!have_oracle(&why)) GTEST_SKIP() << why << ": element cast oracle not run";
  test::TempDir dir;
  const std::vector<float> values = cast_values();
  write_values(dir / "values.f32", values);
  run_oracle("cast " + quoted(dir.path()) + " e4m3 e5m2 e2m3 e3m2 e2m1");
  for (ElementType t : kTypes) {
    const ElementFormat& f = element_format(t);
    const std::vector<std::uint8_t> expected = read_values<std::uint8_t>(dir / (std::string(f.name) + ".codes"));
    ASSERT_EQ(expected.size(), values.size());
    std::int64_t ties = 0, subnormal = 0, saturated = 0, mismatches = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float rounded = round_to_element(values[i], f);
      const std::uint8_t code = element_code(rounded, t);
      const double reference = round_to_element_reference(values[i], t);
      if (code != expected[i] || static_cast<double>(rounded) != reference || element_value(code, t) != rounded) {
        if (++mismatches <= 5)
          ADD_FAILURE() << f.name << ": value " << values[i] << " (index " << i << "): code " << int(code)
                        << ", ml_dtypes " << int(expected[i]) << ", fast " << rounded << ", reference " << reference;
      }
      // What the inputs cover, counted on the reference grid.
      const double a = std::min(std::fabs(static_cast<double>(values[i])), static_cast<double>(f.max_finite));
      int ex = 0;
      std::frexp(a, &ex);
      const double spacing = std::ldexp(1.0, std::max(ex - 1, f.emin) - f.mantissa_bits);
      const double k = a / spacing;
      if (a > 0 && k - std::floor(k) == 0.5) ++ties;
      if (rounded != 0 && std::fabs(rounded) < std::ldexp(1.0f, f.emin)) ++subnormal;
      if (std::fabs(values[i]) >= f.max_finite) ++saturated;
    }
    EXPECT_EQ(mismatches, 0) << f.name;
    std::printf("element %s: %zu values compared, %lld exact ties, %lld subnormal results, %lld at or beyond +-%g\n",
                f.name, values.size(), static_cast<long long>(ties), static_cast<long long>(subnormal),
                static_cast<long long>(saturated), static_cast<double>(f.max_finite));
    EXPECT_GE(values.size(), 100000u);
    EXPECT_GE(ties, 20);
    EXPECT_GE(subnormal, 4);
    EXPECT_GE(saturated, 12);
  }
}

// Rows of K = 116 (three blocks of 32 and a short one of 20) with every kind of block.
std::vector<float> mx_rows(ElementType t, std::int64_t rows, std::int64_t K) {
  std::mt19937 rng(62 + static_cast<int>(t));
  const std::vector<float> g = grid(t);
  const ElementFormat& f = element_format(t);
  std::vector<float> x(static_cast<std::size_t>(rows * K));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t begin = 0; begin < K; begin += 32) {
      const std::int64_t len = std::min<std::int64_t>(32, K - begin);
      float* b = x.data() + r * K + begin;
      const int kind = static_cast<int>(rng() % 6);
      const int s = std::uniform_int_distribution<int>(-140, 100)(rng);
      for (std::int64_t i = 0; i < len; ++i) {
        switch (kind) {
          case 0: b[i] = random_float(rng, s, s + 12); break;  // wide, with saturation under floor
          case 1: {  // exact ties after scaling by 2^s (the block maximum set below)
            const std::size_t j = rng() % (g.size() - 1);
            b[i] = std::ldexp((g[j] + g[j + 1]) / 2, std::max(s, -120)) * ((rng() & 1) ? 1.0f : -1.0f);
            break;
          }
          case 2: b[i] = 0.0f; break;  // an all-zero block
          case 3: b[i] = random_float(rng, s - 20, s); break;
          default: b[i] = random_float(rng, -10, 10); break;
        }
      }
      if (kind == 1) b[rng() % len] = std::ldexp(f.max_finite, std::max(s, -120));   // amax on the grid
      if (kind == 3) b[rng() % len] = std::ldexp(1.0f, s);                              // amax a power of two
      if (kind == 4) b[rng() % len] = std::ldexp(1.9999f, 3);                           // amax above 1.75·2^k
    }
  }
  return x;
}

TEST(FloatFormatsOracle, MxBlocksEqualTheOracle) {
  std::string why;
  if (!have_oracle(&why)) GTEST_SKIP() << why << ": MX oracle not run";
  test::TempDir dir;
  const std::int64_t rows = 1000, K = 116, blocks = 4;
  for (ElementType t : kTypes) {
    const std::vector<float> x = mx_rows(t, rows, K);
    write_values(dir / "mx_in.f32", x);
    for (const bool up : {false, true}) {
      const std::string rule = up ? "up" : "floor";
      run_oracle("mx " + quoted(dir.path()) + " " + std::to_string(K) + " " + to_string(t) + " " + rule);
      const auto exps = read_values<std::int8_t>(dir / ("mx_" + to_string(t) + "_" + rule + ".exps"));
      const auto codes = read_values<std::uint8_t>(dir / ("mx_" + to_string(t) + "_" + rule + ".codes"));
      ASSERT_EQ(codes.size(), x.size());
      const MxFormat format{t, 32, up};
      const std::vector<float> g = grid(t);
      std::vector<float> y(x.size());
      std::vector<std::int8_t> got_exps(static_cast<std::size_t>(rows * blocks));
      std::vector<std::uint8_t> got_codes(x.size());
      std::vector<double> x64(x.begin(), x.end()), y64(x.size());
      std::int64_t zero_blocks = 0, power_of_two = 0, code_mismatch = 0, exp_mismatch = 0, ref_mismatch = 0, ties = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        mx_round_trip_row(x.data() + r * K, y.data() + r * K, K, format, got_exps.data() + r * blocks,
                          got_codes.data() + r * K);
        mx_round_trip_row_reference(x64.data() + r * K, y64.data() + r * K, K, format);
        for (std::int64_t b = 0; b < blocks; ++b) {
          float amax = 0;
          for (std::int64_t i = b * 32; i < std::min(K, b * 32 + 32); ++i) amax = std::max(amax, std::fabs(x[r * K + i]));
          zero_blocks += amax == 0;
          int e = 0;
          power_of_two += amax > 0 && std::frexp(amax, &e) == 0.5f;
          exp_mismatch += got_exps[r * blocks + b] != exps[r * blocks + b];
        }
      }
      for (std::size_t i = 0; i < x.size(); ++i) {
        code_mismatch += got_codes[i] != codes[i];
        ref_mismatch += static_cast<double>(y[i]) != y64[i];
        // x / X exactly halfway between two element values (X = 2^s of its block).
        const int s = got_exps[static_cast<std::size_t>(i / K) * blocks + (i % K) / 32];
        const double v = std::fabs(std::ldexp(static_cast<double>(x[i]), -s));
        for (std::size_t gi = 0; gi + 1 < g.size() && v <= g.back(); ++gi) ties += v == (g[gi] + g[gi + 1]) / 2.0;
      }
      EXPECT_EQ(exp_mismatch, 0) << to_string(t) << " " << rule;
      EXPECT_EQ(code_mismatch, 0) << to_string(t) << " " << rule;
      EXPECT_EQ(ref_mismatch, 0) << to_string(t) << " " << rule << ": fast and float64 reference differ";
      EXPECT_GT(zero_blocks, 50);
      EXPECT_GT(power_of_two, 50);
      EXPECT_GT(ties, 1000);
      std::printf("mx %s %s: %zu values (%lld exact ties) in %lld blocks (%lld all zero, %lld with a power-of-two amax) "
                  "compared\n",
                  to_string(t).c_str(), rule.c_str(), x.size(), static_cast<long long>(ties),
                  static_cast<long long>(rows * blocks), static_cast<long long>(zero_blocks),
                  static_cast<long long>(power_of_two));
    }
  }
}

TEST(FloatFormatsOracle, Nvfp4TensorsEqualTheOracle) {
  std::string why;
  if (!have_oracle(&why)) GTEST_SKIP() << why << ": NVFP4 oracle not run";
  test::TempDir dir;
  const std::int64_t tensors = 400, R = 8, K = 40, blocks = 3;  // two blocks of 16 and one of 8
  std::mt19937 rng(63);
  std::vector<float> x(static_cast<std::size_t>(tensors * R * K));
  const std::vector<float> e2m1 = grid(ElementType::e2m1);
  for (std::int64_t i = 0; i < tensors; ++i) {
    float* t = x.data() + i * R * K;
    const int kind = static_cast<int>(i % 6);
    const int s = std::uniform_int_distribution<int>(-30, 30)(rng);
    for (std::int64_t j = 0; j < R * K; ++j) {
      switch (kind) {
        case 0: t[j] = random_float(rng, s - 8, s); break;
        case 1: t[j] = (j / 16) % 3 == 1 ? 0.0f : random_float(rng, s - 4, s); break;  // zero blocks inside
        case 2: t[j] = std::ldexp(e2m1[rng() % e2m1.size()], s) * ((rng() & 1) ? 1.0f : -1.0f); break;
        case 3: t[j] = i % 10 == 3 ? 0.0f : random_float(rng, -150, -140); break;  // all zero; tiny amax
        case 5: {  // exact E2M1 ties: s_tensor = 2688 / 2688 = 1 and blocks of amax 6 · 2^k give p = 2^k
          const int k = static_cast<int>((j / 16) % 7) - 3;
          t[j] = j % 16 == 0 ? std::ldexp(6.0f, k)
                             : std::ldexp((e2m1[rng() % (e2m1.size() - 1)] + e2m1[1 + rng() % (e2m1.size() - 1)]) / 2, k);
          break;
        }
        default: t[j] = random_float(rng, -20, 20); break;
      }
    }
    if (kind == 2) t[rng() % (R * K)] = std::ldexp(1.0f, s);
    if (kind == 5) t[R * K - 1] = 2688.0f;  // the tensor's amax: s_tensor exactly 1
  }
  write_values(dir / "nvfp4_in.f32", x);
  run_oracle("nvfp4 " + quoted(dir.path()) + " " + std::to_string(R) + " " + std::to_string(K));
  const auto scales = read_values<float>(dir / "nvfp4.scales");
  const auto codes = read_values<std::uint8_t>(dir / "nvfp4.codes");
  ASSERT_EQ(codes.size(), x.size());
  std::vector<float> y(x.size()), y_ref(x.size()), got_scales(static_cast<std::size_t>(tensors * R * blocks));
  std::vector<std::uint8_t> got_codes(x.size());
  std::int64_t scale_mismatch = 0, code_mismatch = 0, ref_mismatch = 0, zero_scales = 0;
  for (std::int64_t i = 0; i < tensors; ++i) {
    const float* t = x.data() + i * R * K;
    float amax = 0;
    for (std::int64_t j = 0; j < R * K; ++j) amax = std::max(amax, std::fabs(t[j]));
    nvfp4_round_trip(t, y.data() + i * R * K, R, K, amax, got_scales.data() + i * R * blocks, got_codes.data() + i * R * K);
    nvfp4_round_trip_reference(t, y_ref.data() + i * R * K, R, K, amax);
  }
  for (std::size_t i = 0; i < got_scales.size(); ++i) {
    scale_mismatch += float_bits(got_scales[i]) != float_bits(scales[i]);
    zero_scales += scales[i] == 0;
  }
  std::int64_t ties = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    code_mismatch += got_codes[i] != codes[i];
    ref_mismatch += float_bits(y[i]) != float_bits(y_ref[i]) && !(y[i] == 0 && y_ref[i] == 0);
  }
  // Elements whose x / p lies exactly halfway between two E2M1 values (p = s_block · s_tensor).
  for (std::int64_t i = 0; i < tensors; ++i) {
    const float* t = x.data() + i * R * K;
    float amax = 0;
    for (std::int64_t j = 0; j < R * K; ++j) amax = std::max(amax, std::fabs(t[j]));
    const float s_tensor = nvfp4_tensor_scale(amax);
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t j = 0; j < K; ++j) {
        const float p = got_scales[(i * R + r) * blocks + j / 16] * s_tensor;
        if (p == 0) continue;
        const double v = std::fabs(static_cast<double>(t[r * K + j] / p));
        for (std::size_t g = 0; g + 1 < e2m1.size(); ++g) ties += v == (e2m1[g] + e2m1[g + 1]) / 2.0;
      }
  }
  EXPECT_EQ(scale_mismatch, 0);
  EXPECT_EQ(code_mismatch, 0);
  EXPECT_EQ(ref_mismatch, 0) << "fast and reference NVFP4 differ";
  EXPECT_GT(zero_scales, 100);
  EXPECT_GT(ties, 1000);
  std::printf("nvfp4: %zu values (%lld exact E2M1 ties), %zu block scales (%lld zero) compared\n", x.size(),
              static_cast<long long>(ties), got_scales.size(), static_cast<long long>(zero_scales));
}

}  // namespace
}  // namespace qeval
