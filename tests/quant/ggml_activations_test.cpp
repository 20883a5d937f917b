// llama.cpp's activation blocks ("activations": "gguf-q8", quant/formats/ggml/activations.h): the fast
// round trip equals the block-by-block reference bit for bit on random rows with exact ties, the
// rounding rules are x86 llama.cpp's (ties to even, 127 / amax), and a layer with the option
// computes the dequantised product of the rounded inputs.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "quant/formats/ggml/activations.h"
#include "quant/schemes/ggml_rules.h"
#include "quant/quantized_linear.h"
#include "quant/schemes/scheme_json.h"
#include "quant/schemes/spec.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using test::throws_with;

// Rows of `k` values whose blocks hit every case: random magnitudes over many binades, exact
// ties (block amax 127·2^e so that x · (127 / amax) = x / 2^e, and x = (n + ½)·2^e), all-zero
// blocks, a ±amax tie, subnormals, one-element-dominant blocks.
at::Tensor hostile_rows(std::int64_t rows, std::int64_t k, std::int64_t block, std::uint32_t seed, bool negative_max) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_int_distribution<int> binade(-30, 20), code(-126, 126), pick(0, 5);
  at::Tensor x = at::empty({rows, k});
  float* p = x.data_ptr<float>();
  for (std::int64_t b = 0; b < rows * k; b += block) {
    const int e = binade(rng);
    const float scale = std::ldexp(1.f, e);
    switch (pick(rng)) {
      case 0:  // plain random
        for (std::int64_t j = 0; j < block; ++j) p[b + j] = u(rng) * scale;
        break;
      case 1:  // exact ties: amax = 127·2^e, others (n + ½)·2^e
        for (std::int64_t j = 0; j < block; ++j) p[b + j] = (static_cast<float>(code(rng)) + 0.5f) * scale;
        p[b + block / 2] = (negative_max ? -127.f : 127.f) * scale;
        break;
      case 2:  // all zero
        for (std::int64_t j = 0; j < block; ++j) p[b + j] = 0.f;
        break;
      case 3:  // +amax and −amax both present
        for (std::int64_t j = 0; j < block; ++j) p[b + j] = u(rng) * scale;
        p[b] = -scale * 2.f;
        p[b + block - 1] = scale * 2.f;
        break;
      case 4:  // subnormals
        for (std::int64_t j = 0; j < block; ++j) p[b + j] = u(rng) * std::ldexp(1.f, -130);
        break;
      default:  // one dominant value, the rest tiny
        for (std::int64_t j = 0; j < block; ++j) p[b + j] = u(rng) * scale * 1e-4f;
        p[b + 3] = -scale * 100.f;
        break;
    }
  }
  return x;
}

void expect_bitwise_equal_to_reference(const at::Tensor& x, GgmlActivationType t) {
  const at::Tensor fast = ggml_activation_round_trip(x, t, "test");
  const std::int64_t k = x.size(-1);
  std::vector<float> ref(static_cast<std::size_t>(k));
  std::int64_t differ = 0;
  for (std::int64_t r = 0; r < x.size(0); ++r) {
    ggml_activation_round_trip_reference(x[r].data_ptr<float>(), ref.data(), k, t);
    differ += std::memcmp(fast[r].data_ptr<float>(), ref.data(), ref.size() * sizeof(float)) != 0;
  }
  EXPECT_EQ(differ, 0) << to_string(t) << ": rows differing from the block reference";
}

TEST(GgmlActivations, FastRoundTripEqualsTheBlockReferenceBitForBit) {
  for (const GgmlActivationType t : {GgmlActivationType::q8_0, GgmlActivationType::q8_1, GgmlActivationType::q8_k,
                                     GgmlActivationType::f16}) {
    const std::int64_t block = t == GgmlActivationType::q8_k ? 256 : 32;
    for (const bool negative_max : {false, true}) {
      const at::Tensor x = hostile_rows(64, 4 * 256, block, 7u + static_cast<unsigned>(t), negative_max);
      expect_bitwise_equal_to_reference(t == GgmlActivationType::f16 ? x.clamp(-60000, 60000) : x, t);
    }
  }
}

TEST(GgmlActivations, Q8_0RoundsTiesToEvenThroughTheReciprocalOfAmax) {
  // amax 127: 127 / amax = 1 exactly, so x · id = x and the ties are the inputs themselves.
  std::vector<float> x(32, 0.f);
  x[0] = 127.f;
  x[1] = 2.5f;   // ties to 2 (roundf would give 3)
  x[2] = 3.5f;   // 4
  x[3] = -2.5f;  // -2 (roundf: -3)
  x[4] = 0.49999997f;
  at::Tensor t = at::from_blob(x.data(), {1, 32}).clone();
  const at::Tensor y = ggml_activation_round_trip(t, GgmlActivationType::q8_0, "test");
  EXPECT_EQ(y[0][0].item<float>(), 127.f);
  EXPECT_EQ(y[0][1].item<float>(), 2.f);
  EXPECT_EQ(y[0][2].item<float>(), 4.f);
  EXPECT_EQ(y[0][3].item<float>(), -2.f);
  EXPECT_EQ(y[0][4].item<float>(), 0.f);
  // The scale is stored as fp16: amax 1000 gives d = fp16(1000/127) = 7.875 (7.874015… rounded to
  // binary16's 2^-8 steps there), so the block's largest value comes back as 127 · 7.875 = 1000.125.
  std::vector<float> z(32, 0.f);
  z[5] = -1000.f;
  const at::Tensor w = ggml_activation_round_trip(at::from_blob(z.data(), {1, 32}).clone(), GgmlActivationType::q8_0, "t");
  EXPECT_EQ(w[0][5].item<float>(), -1000.125f);
}

TEST(GgmlActivations, Q8_KTakesTheSignedMaximumAndAFloat32Scale) {
  std::vector<float> x(256, 0.f);
  x[10] = -254.f;  // max = −254: iscale = 0.5, d = 2
  x[11] = 3.f;     // 1.5 → 2 (ties to even) → 4
  x[12] = 5.f;     // 2.5 → 2 → 4
  x[13] = 254.f;   // a later +amax does not change max (the first of largest |x| wins)
  const at::Tensor y =
      ggml_activation_round_trip(at::from_blob(x.data(), {1, 256}).clone(), GgmlActivationType::q8_k, "test");
  EXPECT_EQ(y[0][10].item<float>(), -254.f);
  EXPECT_EQ(y[0][11].item<float>(), 4.f);
  EXPECT_EQ(y[0][12].item<float>(), 4.f);
  EXPECT_EQ(y[0][13].item<float>(), 254.f);
}

TEST(GgmlActivations, VecDotTypesAreLlamaCppsTable) {
  EXPECT_EQ(ggml_vec_dot_type(GgmlType::Q4_0), GgmlActivationType::q8_0);
  EXPECT_EQ(ggml_vec_dot_type(GgmlType::Q8_0), GgmlActivationType::q8_0);
  EXPECT_EQ(ggml_vec_dot_type(GgmlType::IQ4_NL), GgmlActivationType::q8_0);
  EXPECT_EQ(ggml_vec_dot_type(GgmlType::MXFP4), GgmlActivationType::q8_0);
  EXPECT_EQ(ggml_vec_dot_type(GgmlType::Q4_1), GgmlActivationType::q8_1);
  EXPECT_EQ(ggml_vec_dot_type(GgmlType::Q5_1), GgmlActivationType::q8_1);
  for (GgmlType k : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    EXPECT_EQ(ggml_vec_dot_type(k), GgmlActivationType::q8_k);
  EXPECT_EQ(ggml_vec_dot_type(GgmlType::F16), GgmlActivationType::f16);
  EXPECT_EQ(ggml_vec_dot_type(GgmlType::F32), GgmlActivationType::f32);
}

TEST(GgmlActivations, RefusesWhatLlamaCppWouldTurnIntoGarbage) {
  at::Tensor x = at::ones({2, 32});
  x[1][3] = std::nanf("");
  EXPECT_TRUE(throws_with([&] { ggml_activation_round_trip(x, GgmlActivationType::q8_0, "layers.0.attn.q"); },
                          {"layers.0.attn.q", "NaN"}));
  at::Tensor big = at::ones({1, 8}) * 70000.f;
  EXPECT_TRUE(throws_with([&] { ggml_activation_round_trip(big, GgmlActivationType::f16, "layers.0.mlp.down"); },
                          {"layers.0.mlp.down", "65504"}));
  EXPECT_TRUE(throws_with([&] { ggml_activation_round_trip(at::ones({1, 40}), GgmlActivationType::q8_0, "w"); },
                          {"40", "Q8_0", "32"}));
}

TEST(GgmlActivations, ALayerMultipliesTheRoundedInputsWithTheDequantisedWeight) {
  const SchemeSpec spec = scheme_from_json(
      nlohmann::json::parse(R"({"weights": {"kind": "ggml", "type": "q4_k", "activations": "gguf-q8"}})"), "spec.json");
  const SchemeSpec plain =
      scheme_from_json(nlohmann::json::parse(R"({"weights": {"kind": "ggml", "type": "q4_k"}})"), "spec.json");
  at::manual_seed(3);
  const at::Tensor w = at::randn({48, 512});
  const at::Tensor bias = at::randn({48});
  const at::Tensor x = at::randn({2, 5, 512}) * 3;
  const QuantizedLinear layer("layers.0.attn.q", w, bias, spec, ExecutionPath::reference);
  const QuantizedLinear weights_only("layers.0.attn.q", w, bias, plain, ExecutionPath::reference);
  EXPECT_NE(layer.describe().find("× Q8_K activations"), std::string::npos) << layer.describe();
  const at::Tensor xq = ggml_activation_round_trip(x, GgmlActivationType::q8_k, "test");
  // The same layer without the option, fed the rounded inputs: the same GEMMs on the same values.
  EXPECT_TRUE(at::equal(layer.forward(x), weights_only.forward(xq)));
  EXPECT_FALSE(at::equal(layer.forward(x), weights_only.forward(x)));
}

}  // namespace
}  // namespace qeval
