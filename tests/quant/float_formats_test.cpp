// The floating-point formats on tensors and in layers (issue 61): FP8 scales per tensor, channel
// and token against the definition written out with the reference rounding; MX rows whose length
// 32 does not divide; static scales that saturate; the percentile rule; a QuantizedLinear of each
// format against the product of its dequantised operands; batch independence; and the scheme
// errors of item 8 (each naming the key and the allowed values).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/error.h"
#include "quant/calibration/static_scales.h"
#include "quant/float_quantize.h"
#include "quant/formats/minifloat.h"
#include "quant/formats/mx.h"
#include "quant/formats/nvfp4.h"
#include "quant/quantized_linear.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "quant/schemes/spec.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

// Expects `fn` to throw qeval::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<std::string> parts) {
  EXPECT_TRUE(test::throws_with(fn, parts));
}

QuantSpec spec_of(const std::string& json_text, const char* role = "weights") {
  return scheme_from_json(nlohmann::json::parse(std::string("{\"") + role + "\": " + json_text + "}"), "test").weights;
}

// The definition with the float64 reference rounding: E(clamp(x / s)) · s in float32 arithmetic.
float fp8_reference(float x, float s, ElementType t) {
  return static_cast<float>(round_to_element_reference(x / s, t)) * s;
}

TEST(FloatFormats, Fp8ScalesPerChannelTensorAndToken) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0, 1);
  at::Tensor w = at::empty({6, 40});
  for (std::int64_t i = 0; i < w.numel(); ++i) w.data_ptr<float>()[i] = n(rng) * (i % 7 == 0 ? 50 : 1);
  w[2].zero_();  // an all-zero channel: scale 1, codes 0
  QuantSpec channel{QuantKind::fp8, Granularity::channel, 0};
  const at::Tensor got = fake_quantize_float_weight(w, channel);
  for (std::int64_t r = 0; r < 6; ++r) {
    const float amax = w[r].abs().max().item<float>();
    const float s = amax == 0 ? 1.0f : amax / 448.0f;
    for (std::int64_t k = 0; k < 40; ++k)
      ASSERT_EQ(got[r][k].item<float>(), fp8_reference(w[r][k].item<float>(), s, ElementType::e4m3)) << r << "," << k;
  }
  QuantSpec tensor{QuantKind::fp8, Granularity::tensor, 0};
  tensor.element = ElementType::e5m2;
  const at::Tensor got_t = fake_quantize_float_weight(w, tensor);
  const float s_t = w.abs().max().item<float>() / 57344.0f;
  for (std::int64_t i = 0; i < w.numel(); ++i)
    ASSERT_EQ(got_t.data_ptr<float>()[i], fp8_reference(w.data_ptr<float>()[i], s_t, ElementType::e5m2)) << i;
  // With max |w| known (the read's finiteness check found it), per tensor and NVFP4's tensor scale
  // take it instead of their own pass: the same bits.
  const float amax_w = w.abs().max().item<float>();
  EXPECT_TRUE(fake_quantize_float_weight(w, tensor, amax_w).equal(got_t));
  const QuantSpec nvfp4 = preset_scheme("nvfp4").weights;
  EXPECT_TRUE(fake_quantize_float_weight(w, nvfp4, amax_w).equal(fake_quantize_float_weight(w, nvfp4)));

  // Activations: per token, and per sequence; each sequence alone gives the same bits (batch independence).
  at::Tensor x = at::randn({3, 5, 40}) * 3;
  for (Granularity g : {Granularity::token, Granularity::tensor}) {
    QuantSpec a{QuantKind::fp8, g, 0};
    const at::Tensor all = fake_quantize_float_activations(x, a);
    for (std::int64_t b = 0; b < 3; ++b)
      EXPECT_TRUE(all[b].equal(fake_quantize_float_activations(x.narrow(0, b, 1), a)[0])) << to_string(g);
    const at::Tensor row = x[1][2];
    const float amax = g == Granularity::token ? row.abs().max().item<float>() : x[1].abs().max().item<float>();
    for (std::int64_t k = 0; k < 40; ++k)
      ASSERT_EQ(all[1][2][k].item<float>(), fp8_reference(row[k].item<float>(), amax / 448.0f, ElementType::e4m3));
  }
}

TEST(FloatFormats, MxRowsEndInAShorterBlockAsIfPaddedWithZeros) {
  std::vector<float> x(100), padded(128, 0.0f), y(100), y_padded(128);
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0, 2);
  for (int i = 0; i < 100; ++i) padded[i] = x[i] = n(rng);
  for (ElementType t : {ElementType::e4m3, ElementType::e2m1}) {
    const MxFormat f{t, 32, false};
    mx_round_trip_row(x.data(), y.data(), 100, f);
    mx_round_trip_row(padded.data(), y_padded.data(), 128, f);
    for (int i = 0; i < 100; ++i) ASSERT_EQ(y[i], y_padded[i]) << i;
  }
}

// Rows for the fast-vs-portable tests: Gaussian values over many binades, exact ties of the
// element grids (small integers and halves), zero blocks, a loud block, float32 subnormals, and
// (when `non_finite`) a NaN and an infinity.
std::vector<float> hostile_row(std::int64_t n, std::uint32_t seed, bool non_finite) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-30, 30), pick(0, 9);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (auto& v : x) {
    const int kind = pick(rng);
    v = kind < 6 ? std::ldexp(g(rng), binade(rng)) : kind < 9 ? static_cast<float>(static_cast<int>(g(rng) * 8)) / 2 : 1e-40f;
  }
  for (std::int64_t i = 0; i < std::min<std::int64_t>(n, 40); ++i) x[static_cast<std::size_t>(i)] = 0.0f;  // zero blocks
  if (n > 70) x[70] = 3.0e5f;
  if (non_finite && n > 90) {
    x[static_cast<std::size_t>(n - 5)] = std::numeric_limits<float>::quiet_NaN();
    x[90] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The AVX-512 paths give the portable loops' bits on random rows of every MX element type, both
// scale roundings and NVFP4, rows that 32 or 16 do not divide included, and NaN and infinities.
TEST(FloatFormats, Avx512BlocksEqualThePortableLoopsBitForBit) {
  if (!element_blocks_avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512: the portable loops run alone";
  std::int64_t rows_compared = 0;
  for (const std::int64_t n : {1, 15, 16, 17, 31, 32, 33, 100, 576, 1000}) {
    for (std::uint32_t seed = 0; seed < 8; ++seed) {
      const bool non_finite = seed % 4 == 3;
      const std::vector<float> x = hostile_row(n, seed * 131 + static_cast<std::uint32_t>(n), non_finite);
      for (const ElementType t : {ElementType::e4m3, ElementType::e5m2, ElementType::e2m3, ElementType::e3m2, ElementType::e2m1}) {
        for (const bool up : {false, true}) {
          const MxFormat f{t, 32, up};
          std::vector<float> fast(x.size()), portable(x.size());
          std::vector<std::int8_t> fast_exp(static_cast<std::size_t>((n + 31) / 32)), portable_exp(fast_exp.size());
          mx_round_trip_row_avx512(x.data(), fast.data(), n, f, nullptr);
          mx_round_trip_row_portable(x.data(), portable.data(), n, f);
          ASSERT_TRUE(same_bits(fast, portable)) << "mx " << to_string(t) << " n " << n << " seed " << seed;
          if (!non_finite) {
            mx_round_trip_row_avx512(x.data(), fast.data(), n, f, fast_exp.data());
            mx_round_trip_row_portable(x.data(), portable.data(), n, f, portable_exp.data());
            ASSERT_EQ(fast_exp, portable_exp) << "mx exponents " << to_string(t) << " n " << n;
          }
          ++rows_compared;
        }
      }
      // NVFP4 over 3 rows of n with the tensor's amax (NaN when a value is NaN, as the callers give it).
      std::vector<float> xs;
      for (int r = 0; r < 3; ++r) xs.insert(xs.end(), x.begin(), x.end());
      float amax = 0;
      for (const float v : xs) amax = std::isnan(v) || std::isnan(amax) ? std::numeric_limits<float>::quiet_NaN() : std::max(amax, std::fabs(v));
      // 1e-30: block scales underflow, p = 0 blocks; 0: a tensor maximum of 0, every scale 0.
      for (const float scale_of : {1.0f, 1e-30f, 0.0f}) {
        const float a = amax * scale_of;
        std::vector<float> fast(xs.size()), portable(xs.size());
        std::vector<float> fast_s(static_cast<std::size_t>(3 * ((n + 15) / 16))), portable_s(fast_s.size());
        nvfp4_round_trip_avx512(xs.data(), fast.data(), 3, n, a, fast_s.data());
        nvfp4_round_trip_portable(xs.data(), portable.data(), 3, n, a, portable_s.data());
        ASSERT_TRUE(same_bits(fast, portable)) << "nvfp4 n " << n << " seed " << seed << " amax " << a;
        ASSERT_TRUE(same_bits(fast_s, portable_s)) << "nvfp4 block scales n " << n << " seed " << seed;
        ++rows_compared;
      }
    }
  }
  EXPECT_EQ(rows_compared, 10 * 8 * (5 * 2 + 3));
}

// The block scales where the AVX-512 paths compute them apart from the portable loops (16 blocks
// on 16 lanes): block maxima that are float32 subnormals (the smallest included), powers of two,
// exactly max_elem · 2^k and the next float above it (where rounding the scale up moves it),
// infinite, and at the clamps of the E8M0 range; more than 16 blocks so that the lanes wrap.
TEST(FloatFormats, Avx512BlockScalesEqualThePortableLoopsAtTheirEdges) {
  if (!element_blocks_avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512: the portable loops run alone";
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> maxima = {std::numeric_limits<float>::denorm_min(), 3 * std::numeric_limits<float>::denorm_min(),
                               1e-40f, std::numeric_limits<float>::min(), std::nextafter(std::numeric_limits<float>::min(), 0.0f),
                               1.0f, 0.5f, 3.0e38f, std::numeric_limits<float>::max(), inf, 1e-30f, 7.0f};
  for (const ElementType t : {ElementType::e4m3, ElementType::e5m2, ElementType::e2m3, ElementType::e3m2, ElementType::e2m1}) {
    const float max_elem = element_format(t).max_finite;
    for (const int k : {-140, -130, -127, -126, -3, 0, 5, 100, 119})
      for (const float m : {std::ldexp(max_elem, k), std::nextafter(std::ldexp(max_elem, k), inf)})
        if (std::isfinite(m) && m > 0) maxima.push_back(m);
  }
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> fraction(-1.0f, 1.0f);
  for (const std::int64_t block : {16, 32}) {
    std::vector<float> x;
    for (const float m : maxima)
      for (std::int64_t i = 0; i < block; ++i)
        x.push_back(i == block / 3 ? -m : m * fraction(rng));  // the maximum, negative, inside the block
    const auto n = static_cast<std::int64_t>(x.size());
    if (block == 32) {
      for (const ElementType t : {ElementType::e4m3, ElementType::e5m2, ElementType::e2m3, ElementType::e3m2, ElementType::e2m1}) {
        for (const bool up : {false, true}) {
          SCOPED_TRACE(testing::Message() << to_string(t) << (up ? " up" : " floor"));
          const MxFormat f{t, 32, up};
          std::vector<float> fast(x.size()), portable(x.size());
          std::vector<std::int8_t> fast_exp(static_cast<std::size_t>(n / 32)), portable_exp(fast_exp.size());
          mx_round_trip_row_avx512(x.data(), fast.data(), n, f, fast_exp.data());
          mx_round_trip_row_portable(x.data(), portable.data(), n, f, portable_exp.data());
          EXPECT_TRUE(same_bits(fast, portable));
          EXPECT_EQ(fast_exp, portable_exp);
        }
      }
    } else {
      // NVFP4 with tensor maxima that put block scales at E4M3's subnormals, its saturation and 0.
      for (const float amax_t : {1.0f, 1e-30f, 3.0e38f, 448.0f * 6.0f, 1e-42f}) {
        SCOPED_TRACE(amax_t);
        std::vector<float> fast(x.size()), portable(x.size());
        std::vector<float> fast_s(static_cast<std::size_t>(n / 16)), portable_s(fast_s.size());
        nvfp4_round_trip_avx512(x.data(), fast.data(), 1, n, amax_t, fast_s.data());
        nvfp4_round_trip_portable(x.data(), portable.data(), 1, n, amax_t, portable_s.data());
        EXPECT_TRUE(same_bits(fast, portable));
        EXPECT_TRUE(same_bits(fast_s, portable_s));
      }
    }
  }
}

// A NaN activation comes out NaN under every format and granularity (never a finite ±max · scale),
// wherever it sits: first or later token, first or later parallel chunk of a long sequence.
TEST(FloatFormats, NanActivationsStayNan) {
  const char* specs[] = {R"({"kind": "fp8", "element": "e4m3", "granularity": "token"})",
                         R"({"kind": "fp8", "element": "e4m3", "granularity": "tensor"})",
                         R"({"kind": "mx", "element": "e2m1", "granularity": "block:32"})",
                         R"({"kind": "nvfp4", "granularity": "block:16"})"};
  for (const char* text : specs) {
    const QuantSpec spec =
        scheme_from_json(nlohmann::json::parse(std::string(R"({"input_activations": )") + text + "}"), "test")
            .input_activations;
    for (const std::int64_t token : {std::int64_t{0}, std::int64_t{5}, std::int64_t{1500}}) {
      at::Tensor x = at::randn({1, 2048, 64});  // 131,072 values: several chunks of the tensor absmax
      x[0][token][7] = std::numeric_limits<float>::quiet_NaN();
      const at::Tensor y = fake_quantize_float_activations(x, spec);
      EXPECT_TRUE(std::isnan(y[0][token][7].item<float>())) << text << " token " << token;
    }
  }
}

TEST(FloatFormats, MxScaleRoundingUpSaturatesNothing) {
  // amax = 1.9 · 2^3 in a block of E2M1 (largest 6 = 1.5 · 2^2): the floor rule's scale 2^1 holds
  // at most 12, so 15.2 saturates to 12; rounding the scale up to 2^2 keeps it (16).
  std::vector<float> x(32, 0.5f), y(32);
  x[0] = 15.2f;
  mx_round_trip_row(x.data(), y.data(), 32, MxFormat{ElementType::e2m1, 32, false});
  EXPECT_EQ(y[0], 12.0f);
  mx_round_trip_row(x.data(), y.data(), 32, MxFormat{ElementType::e2m1, 32, true});
  EXPECT_EQ(y[0], 16.0f);
  EXPECT_EQ(mx_scale_exponent(15.2f, MxFormat{ElementType::e2m1, 32, false}), 1);
  EXPECT_EQ(mx_scale_exponent(15.2f, MxFormat{ElementType::e2m1, 32, true}), 2);
  // The smallest scale is a float32 subnormal, 2^-127, not flushed: 2^-126 · 6 / 4 stays exact.
  std::vector<float> tiny(32, 0.0f), tiny_y(32);
  tiny[0] = std::ldexp(1.5f, -125);
  mx_round_trip_row(tiny.data(), tiny_y.data(), 32, MxFormat{ElementType::e2m1, 32, false});
  EXPECT_EQ(mx_scale_exponent(tiny[0], MxFormat{ElementType::e2m1, 32, false}), -127);
  EXPECT_EQ(tiny_y[0], tiny[0]);
}

TEST(FloatFormats, StaticScalesSaturateBeyondTheCalibratedRange) {
  QuantSpec int8{QuantKind::int8_absmax, Granularity::tensor, 0};
  int8.calibration = ActivationCalibration{4, 100};
  const float s = static_activation_scale(int8, 2.54);  // 0.02
  at::Tensor x = at::tensor({0.0f, 0.01f, 0.03f, -2.54f, 100.0f, -7.0f}).reshape({1, 1, 6});
  const at::Tensor y = fake_quantize_static(x, int8, s);
  EXPECT_FLOAT_EQ(y[0][0][4].item<float>(), 127 * s);
  EXPECT_FLOAT_EQ(y[0][0][5].item<float>(), -127 * s);
  EXPECT_EQ(y[0][0][1].item<float>(), 0.0f);  // 0.5 rounds half to even: 0
  EXPECT_FLOAT_EQ(y[0][0][2].item<float>(), 2 * s);  // 1.5 → 2
  QuantSpec fp8{QuantKind::fp8, Granularity::tensor, 0};
  fp8.calibration = ActivationCalibration{4, 100};
  const float s8 = static_activation_scale(fp8, 4.48);
  const at::Tensor y8 = fake_quantize_static(x, fp8, s8);
  EXPECT_FLOAT_EQ(y8[0][0][4].item<float>(), 448 * s8);
  EXPECT_EQ(static_activation_scale(fp8, 0.0), 1.0f);
}

TEST(FloatFormats, PercentileIsLinearBetweenOrderStatistics) {
  std::vector<float> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile_linear(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile_linear(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile_linear(v, 25), 1.75);
  std::vector<float> one = {7};
  EXPECT_DOUBLE_EQ(percentile_linear(one, 0.5), 7);
}

TEST(FloatFormats, LayersRunTheProductOfTheirDequantisedOperands) {
  at::manual_seed(3);
  const at::Tensor w = at::randn({24, 72}), bias = at::randn({24}), x = at::randn({2, 9, 72}) * 4;
  for (const char* name : {"fp8-e4m3", "fp8-e5m2", "fp8-e4m3-tensor", "mxfp8", "mxfp6", "mxfp4", "nvfp4", "nvfp4-weights"}) {
    SCOPED_TRACE(name);
    const SchemeSpec spec = preset_scheme(name);
    ASSERT_FALSE(kernel_path_unavailable_reason(spec).empty());
    const QuantizedLinear layer("layers.0.mlp.up", w, bias, spec, ExecutionPath::reference);
    const at::Tensor wq = fake_quantize_float_weight(w, spec.weights);
    EXPECT_TRUE(layer.dequantized_weight().equal(wq));
    const at::Tensor xq = spec.input_activations.enabled() ? fake_quantize_float_activations(x, spec.input_activations) : x;
    const at::Tensor expected = at::linear(xq, wq, bias);
    const at::Tensor got = layer.forward(x);
    EXPECT_TRUE(at::allclose(got, expected, 1e-5, 1e-5)) << (got - expected).abs().max().item<float>();
    // Each sequence alone gives the same bits.
    EXPECT_TRUE(got[1].equal(layer.forward(x.narrow(0, 1, 1))[0]));
    EXPECT_GT((got - at::linear(x, w, bias)).abs().max().item<float>(), 0.0f);  // it does quantise
  }
}

TEST(FloatFormats, StaticLayersNeedCalibratedScales) {
  const at::Tensor w = at::randn({8, 32});
  SchemeSpec spec = preset_scheme("int8-moderate-static");
  expect_error([&] { QuantizedLinear("layers.0.attn.q", w, at::Tensor(), spec, ExecutionPath::kernel); },
               {"layers.0.attn.q", "none was calibrated"});
  auto scales = std::make_shared<CalibratedScales>();
  scales->amax["layers.0.attn.q"] = 2.0;
  spec.calibrated = scales;
  const QuantizedLinear kernel("layers.0.attn.q", w, at::Tensor(), spec, ExecutionPath::kernel);
  const QuantizedLinear reference("layers.0.attn.q", w, at::Tensor(), spec, ExecutionPath::reference);
  const at::Tensor x = at::randn({2, 5, 32}) * 2;
  const at::Tensor xq = fake_quantize_static(x, spec.input_activations, 2.0f / 127.0f);
  EXPECT_TRUE(at::allclose(kernel.forward(x), at::linear(xq, kernel.dequantized_weight()), 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(kernel.forward(x), reference.forward(x), 1e-5, 1e-5));
}

TEST(FloatFormats, BadSpecsAreRefusedNamingTheKeyAndTheAllowedValues) {
  expect_error([] { spec_of(R"({"kind": "fp8", "element": "e4m4", "granularity": "channel"})"); },
               {"test: weights", "element 'e4m4'", "e4m3, e5m2"});
  expect_error([] { spec_of(R"({"kind": "fp8", "element": "e2m1", "granularity": "channel"})"); },
               {"element 'e2m1'", "valid: e4m3, e5m2"});
  expect_error([] { spec_of(R"({"kind": "fp8", "granularity": "channel"})"); }, {"needs an \"element\""});
  expect_error([] { spec_of(R"({"kind": "mx", "element": "e2m1", "granularity": "block:16"})"); },
               {"block:16", "blocks of 32", "valid: block:32"});
  expect_error([] { spec_of(R"({"kind": "nvfp4", "granularity": "block:32"})"); }, {"blocks of 16"});
  expect_error([] { spec_of(R"({"kind": "nvfp4", "granularity": "channel"})"); }, {"granularity 'channel'", "block:16"});
  expect_error([] { spec_of(R"({"kind": "mx", "element": "e3m2", "granularity": "block:32", "scale_rounding": "nearest"})"); },
               {"scale_rounding 'nearest'", "floor", "up"});
  expect_error([] { spec_of(R"({"kind": "fp8", "element": "e4m3", "granularity": "token"})"); },
               {"granularity 'token'", "tensor, channel"});
  auto inputs = [](const std::string& text) {
    return scheme_from_json(nlohmann::json::parse("{\"input_activations\": " + text + "}"), "my.json");
  };
  expect_error([&] { inputs(R"({"kind": "fp8", "element": "e4m3", "granularity": "tensor", "calibration": {"windows": 0}})"); },
               {"my.json", "calibration.windows", "at least 1"});
  expect_error([&] {
    inputs(R"({"kind": "int8_absmax", "granularity": "tensor", "calibration": {"windows": 4, "statistic": "percentile:0"}})");
  }, {"percentile", "(0, 100]"});
  expect_error([&] {
    inputs(R"({"kind": "int8_absmax", "granularity": "tensor", "calibration": {"windows": 4, "statistic": "percentile:100.5"}})");
  }, {"(0, 100]"});
  expect_error([&] {
    inputs(R"({"kind": "int8_absmax", "granularity": "tensor", "calibration": {"windows": 4, "statistic": "median"}})");
  }, {"statistic 'median'", "max, percentile:P"});
  expect_error([&] { inputs(R"({"kind": "fp8", "element": "e4m3", "granularity": "token", "calibration": {"windows": 4}})"); },
               {"calibration", "needs granularity tensor", "token"});
  expect_error([&] { inputs(R"({"kind": "mx", "element": "e4m3", "granularity": "block:32", "calibration": {"windows": 4}})"); },
               {"calibration", "int8_absmax or fp8", "mx"});
  expect_error([] {
    scheme_from_json(nlohmann::json::parse(R"({"output_activations": {"kind": "fp8", "element": "e4m3", "granularity": "tensor"}})"),
                     "out.json");
  }, {"out.json", "not offered for output activations"});
  // A percentile round-trips through the resolved spec.
  const SchemeSpec p = inputs(
      R"({"kind": "int8_absmax", "granularity": "tensor", "calibration": {"windows": 4, "statistic": "percentile:99.9"}})");
  EXPECT_EQ(scheme_to_json(p).at("input_activations").at("calibration").at("statistic"), "percentile:99.9");
  EXPECT_DOUBLE_EQ(p.input_activations.calibration->percentile, 99.9);
}

}  // namespace
}  // namespace qeval
