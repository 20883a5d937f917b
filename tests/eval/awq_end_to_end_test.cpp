// AWQ end to end on a real model: qeval's calibration pass (eval/weight_calibration_pass.h with
// eval/awq_layer.h) on stories260K chooses llm-compressor 0.14's grid points and gives its codes,
// scales, zero points and folded norms, mapping by mapping and linear by linear, from the same
// calibration token ids.
//
// tests/oracle/make_awq_model_fixtures.py converted stories260K.bin to a Hugging Face
// LlamaForCausalLM (make_gptq_model_fixtures.py's conversion: q/k rows permuted for HF's
// rotate-half rotary, put back here in llama2.c's order), ran llm-compressor's oneshot with
// AWQModifier (its Llama default mappings, duo scaling, n_grid 20) then QuantizationModifier on 16
// windows of 128 TinyStories tokens, each window one sample, and wrote
// tests/eval/fixtures/awq_stories260k_llmc.json: the windows, each mapping's grid losses and chosen
// point, every quantised linear's codes, scales and zero points, both norms' folded gains per layer,
// and the NLL of the converted model and of llm-compressor's fake-quantised model on 8 held-out
// windows.
//
// Per channel, not groups of 128: llm-compressor cannot run W4A16_ASYM's group 128 on this model
// (K = 64 crashes its weight observer, K = 172 is refused: gptq_end_to_end_test.cpp). The fixture's
// recipe is W4A16_ASYM's weights (4 bits, asymmetric, min/max) with strategy "channel", and the
// fixture carries qeval's equivalent spec (int4_zeropoint, granularity channel, method awq,
// duo_scaling true, n_grid 20, 16 windows). v → o is skipped on both sides (4 kv heads for 8 heads:
// v has 32 outputs, o 64 inputs), so each layer has three mappings.
//
// The stream: llm-compressor's SequentialPipeline runs its propagating pass inside
// DisableQuantization, and QuantizationModifier only observes weights, so layer l + 1 is calibrated
// on the outputs of layers 0..l folded but not quantised (the fixture measures it: each mapping's
// x_mean equals the folded full-precision model's within 4e-7 and differs from the fake-quantised
// model's by 3-18 %). AutoAWQ does the same (it takes a layer's outputs before scaling it). qeval's
// pass does so for AWQ (GPTQ's, whose reference writes quantised weights in place, propagates the
// quantised layer).
//
// What may differ and why the limits below hold. Everything here is float32 on both sides, but
// summed in other orders (attention, the norm's mean square, the loss's batch sums, x_mean's float32
// sums), so the per-point losses agree to a relative 1e-6 or so, not to the bit. A grid choice
// between two points whose losses are that close could go either way, and then that mapping's
// linears and every later layer change. Here the closest runner-up is 4.7e-4 relative above the
// chosen point (layers.1.mlp_norm), a thousand times the losses' disagreement, so the test asks for
// every grid index equal and records the losses' largest relative difference. A code can differ where the folded
// weight · 1/scale lies within a float32 ulp of a rounding boundary (the folded weights carry the
// scales' float32 rounding); zero points are round(−8 − lo/s) of the same kind. On this fixture
// every grid index, code and zero point is equal, the scales within 2.8e-7 relative, the folded
// norms within 1.9e-7, the losses within 4.1e-7 (docs/calibrated.md has the table); the
// limits (every grid index; codes and zeros ≥ 99 % overall and ≥ 97 % per linear; scales and folded
// norms within 1e-5 relative) leave room for another BLAS and still fail W4A16_ASYM without AWQ
// (round to nearest of the original weights with their own min/max parameters), which agrees on
// 61.9 % of the codes (the test records it and requires it below 97 %). Mutations of the pass
// caught here (docs/calibrated.md): the quantised propagation qeval had before this test, folding
// on the wrong side, and always taking the search's first grid point (whose ΔNLL happens to lie
// within one standard error of llm-compressor's, hence the NLL within 1e-4 as well).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/files.h"
#include "eval/evaluator.h"
#include "eval/weight_calibration_pass.h"
#include "kernels/w4_gemm.h"
#include "model/transformer.h"
#include "quant/calibrated_weights.h"
#include "quant/calibration/awq_search.h"
#include "quant/calibration/awq_weights.h"
#include "quant/rewrite.h"
#include "quant/schemes/scheme_json.h"
#include "tests/eval/stories260k_end_to_end.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

constexpr const char* kFixture = "tests/eval/fixtures/awq_stories260k_llmc.json";

const nlohmann::json& fixture() {
  static const nlohmann::json j = nlohmann::json::parse(read_file(test::repo_path(kFixture)));
  return j;
}

struct Agreement {
  std::int64_t same = 0, total = 0;
  double fraction() const { return total ? static_cast<double>(same) / static_cast<double>(total) : 0.0; }
  void add(const Agreement& o) {
    same += o.same;
    total += o.total;
  }
};

// Counts positions where the [n] uint8 tensor equals the hex digits.
Agreement count_equal(const at::Tensor& got, const std::string& hex, std::int64_t* first_difference) {
  const at::Tensor g = got.to(at::kByte).contiguous().view({-1});
  Agreement a;
  a.total = g.numel();
  *first_difference = -1;
  for (std::int64_t i = 0; i < a.total; ++i) {
    if (g.data_ptr<std::uint8_t>()[i] == test::hex_digit(hex, static_cast<std::size_t>(i)))
      ++a.same;
    else if (*first_difference < 0)
      *first_difference = i;
  }
  return a;
}

double max_rel_diff(const at::Tensor& got, const at::Tensor& expected) {
  return ((got.to(at::kDouble) - expected.to(at::kDouble)).abs() / expected.to(at::kDouble).abs().clamp_min(1e-30))
      .max()
      .item<double>();
}

// "layers.3.mlp.gate" → "mlp.gate": the agreement table's columns.
std::string kind_of(const std::string& linear) { return linear.substr(linear.find('.', 7) + 1); }

struct Calibration {
  SchemeSpec spec;
  Transformer full;
};

Calibration calibrate_like_llm_compressor() {
  const nlohmann::json& j = fixture();
  const std::vector<Window> calibration = test::windows_of(j.at("calibration_windows"), 8);
  Calibration c{scheme_from_json(j.at("qeval_spec"), kFixture), test::stories260k()};
  c.spec.name = "awq-w4-channel";
  auto reader = transformer_reader(c.full);
  // One window a batch, as the fixture's oneshot (batch_size 1): the loss's and x_mean's float32
  // batch sums in the same grouping.
  WeightCalibrator calibrator(
      *reader,
      [&](std::int64_t n) {
        EXPECT_EQ(n, static_cast<std::int64_t>(calibration.size()));
        return CalibrationWindows{calibration, {{"data", kFixture}}};
      },
      1);
  c.spec.calibrated_weights = calibrator.weights_for(c.spec);
  return c;
}

TEST(AwqEndToEnd, TheConvertedHuggingFaceModelIsTheSameFunction) {
  const nlohmann::json& j = fixture();
  const std::vector<Window> held_out = test::windows_of(j.at("held_out_windows"), 0);
  const at::Tensor nll =
      test::token_nll(test::stories260k(), held_out).view({static_cast<std::int64_t>(held_out.size()), -1});
  const auto expected = j.at("full_precision").at("per_window").get<std::vector<double>>();
  ASSERT_EQ(expected.size(), held_out.size());
  for (std::size_t i = 0; i < held_out.size(); ++i)
    EXPECT_NEAR(nll[static_cast<std::int64_t>(i)].mean().item<double>(), expected[i], 1e-5) << "window " << i;
}

TEST(AwqEndToEnd, PerChannelEqualsLlmCompressor) {
  const nlohmann::json& j = fixture();
  const Calibration c = calibrate_like_llm_compressor();
  const CalibratedWeights& made = *c.spec.calibrated_weights;

  // 1. The mappings: the same ones searched, in order, each with the same grid point.
  std::vector<nlohmann::json> ran;
  std::int64_t skipped = 0;
  for (const nlohmann::json& m : made.description.at("mappings")) {
    if (m.contains("skipped")) {
      ++skipped;
      EXPECT_NE(m.at("skipped").get<std::string>().find("grouped-query"), std::string::npos) << m.dump();
    } else {
      ran.push_back(m);
    }
  }
  EXPECT_EQ(skipped, 5) << "v → o of each layer";
  const nlohmann::json& expected_mappings = j.at("mappings");
  ASSERT_EQ(ran.size(), expected_mappings.size());
  std::int64_t same_grid = 0;
  double loss_rel = 0.0;
  for (std::size_t i = 0; i < ran.size(); ++i) {
    const nlohmann::json &got = ran[i], &want = expected_mappings[i];
    SCOPED_TRACE(got.at("name").get<std::string>());
    EXPECT_EQ(got.at("smooth"), want.at("smooth"));
    EXPECT_EQ(got.at("balance"), want.at("balance"));
    EXPECT_EQ(got.at("tokens"), want.at("tokens"));
    const std::size_t index = got.at("grid_index"), expected_index = want.at("grid_index");
    const auto losses = want.at("losses").get<std::vector<double>>();
    const double first = std::abs(got.at("initial_loss").get<double>() - losses.front()) / losses.front();
    const double chosen = std::abs(got.at("loss").get<double>() - losses.at(index)) / losses.at(index);
    loss_rel = std::max({loss_rel, first, chosen});
    ::testing::Test::RecordProperty(got.at("smooth").get<std::string>() + ".grid_index",
                                    fmt::format("{} (llm-compressor {})", index, expected_index));
    same_grid += index == expected_index;
    EXPECT_EQ(index, expected_index) << "qeval's loss there " << got.at("loss") << ", llm-compressor's losses "
                                     << want.at("losses").dump();
    EXPECT_LT(first, 1e-4) << "first grid point's loss: qeval " << got.at("initial_loss") << ", llm-compressor "
                           << losses.front();
  }
  ::testing::Test::RecordProperty("grid_indices_equal", fmt::format("{} of {}", same_grid, ran.size()));
  ::testing::Test::RecordProperty("losses_max_rel_diff", fmt::format("{:.3g}", loss_rel));

  // 2. Every quantised linear's codes, scales and zero points.
  const AwqOptions options = awq_options(c.spec.weights);
  ASSERT_EQ(made.by_name.size(), j.at("linears").size()) << "qeval and llm-compressor quantise the same linears";
  Agreement codes_all, zeros_all, without_awq;
  std::map<std::string, Agreement> codes_by_kind;
  std::map<std::string, double> scales_by_kind;
  double scale_rel = 0.0;
  for (const auto& [name, ref] : j.at("linears").items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(made.by_name.count(name));
    const CalibratedWeight& got = made.by_name.at(name);
    ASSERT_TRUE(got.w4.has_value());
    const std::int64_t N = ref.at("shape")[0], K = ref.at("shape")[1];
    ASSERT_EQ(ref.at("groups"), 1);
    const at::Tensor codes = kernels::unpack_u4(got.w4->qweight, K).contiguous();  // [N, K] uint8
    ASSERT_EQ(codes.size(0), N);
    ASSERT_EQ(got.w4->scales.sizes(), (at::IntArrayRef{N, 1}));
    const std::string hex = ref.at("codes"), zhex = ref.at("zeros");
    ASSERT_EQ(static_cast<std::int64_t>(hex.size()), N * K);
    ASSERT_EQ(static_cast<std::int64_t>(zhex.size()), N);
    std::int64_t first_code = -1, first_zero = -1, unused = -1;
    const Agreement a = count_equal(codes, hex, &first_code);
    const Agreement z = count_equal(got.w4->zeros.round(), zhex, &first_zero);
    // The negative control: W4A16_ASYM without AWQ (the original weight, its own min/max parameters).
    const AwqQuantized plain = awq_quantize(test::float_weight_of(c.full, name).to(at::kFloat).contiguous(), options, name);
    without_awq.add(count_equal(plain.codes, hex, &unused));
    const at::Tensor expected_scales =
        at::tensor(ref.at("scales").get<std::vector<double>>(), at::kDouble).to(at::kFloat).view({N, 1});
    const double s_rel = max_rel_diff(got.w4->scales, expected_scales);
    scale_rel = std::max(scale_rel, s_rel);
    scales_by_kind[kind_of(name)] = std::max(scales_by_kind[kind_of(name)], s_rel);
    codes_all.add(a);
    zeros_all.add(z);
    codes_by_kind[kind_of(name)].add(a);
    ::testing::Test::RecordProperty(name + ".codes_equal", fmt::format("{:.4f}", a.fraction()));
    ::testing::Test::RecordProperty(name + ".zeros_equal", fmt::format("{:.4f}", z.fraction()));
    ::testing::Test::RecordProperty(name + ".scales_max_rel_diff", fmt::format("{:.3g}", s_rel));
    EXPECT_GE(a.fraction(), 0.97) << a.same << " of " << a.total << " codes equal; first different at row "
                                  << first_code / K << " column " << first_code % K;
    EXPECT_GE(z.fraction(), 0.97) << z.same << " of " << z.total << " zero points equal; first different at row "
                                  << first_zero;
    EXPECT_LT(s_rel, 1e-5) << "scales";
  }
  for (const auto& [kind, a] : codes_by_kind) {
    ::testing::Test::RecordProperty(kind + ".codes_equal", fmt::format("{:.4f}", a.fraction()));
    ::testing::Test::RecordProperty(kind + ".scales_max_rel_diff", fmt::format("{:.3g}", scales_by_kind[kind]));
  }
  ::testing::Test::RecordProperty("codes_equal", fmt::format("{:.6f} ({} of {})", codes_all.fraction(), codes_all.same,
                                                             codes_all.total));
  ::testing::Test::RecordProperty("zeros_equal", fmt::format("{:.6f}", zeros_all.fraction()));
  ::testing::Test::RecordProperty("scales_max_rel_diff", fmt::format("{:.3g}", scale_rel));
  ::testing::Test::RecordProperty("without_awq_codes_equal", fmt::format("{:.4f}", without_awq.fraction()));
  EXPECT_GE(codes_all.fraction(), 0.99) << codes_all.same << " of " << codes_all.total << " codes equal";
  EXPECT_GE(zeros_all.fraction(), 0.99) << zeros_all.same << " of " << zeros_all.total << " zero points equal";
  EXPECT_LT(without_awq.fraction(), 0.97) << "W4A16_ASYM without AWQ would pass: the limits could not tell AWQ from it";

  // 3. The folded norms.
  double norm_rel = 0.0;
  for (const auto& [name, values] : j.at("folded_norms").items()) {
    ASSERT_TRUE(made.replaced_tensors.count(name)) << name;
    const at::Tensor expected = at::tensor(values.get<std::vector<double>>(), at::kDouble).to(at::kFloat);
    const double rel = max_rel_diff(made.replaced_tensors.at(name), expected);
    norm_rel = std::max(norm_rel, rel);
    EXPECT_LT(rel, 1e-5) << name;
  }
  ::testing::Test::RecordProperty("folded_norms_max_rel_diff", fmt::format("{:.3g}", norm_rel));

  // 4. The held-out NLL of qeval's scheme (folded norms, codes on the reference path) against
  // llm-compressor's fake-quantised model on the same tokens: within the paired standard error
  // (over tokens) of the scheme's ΔNLL against full precision.
  const std::vector<Window> held_out = test::windows_of(j.at("held_out_windows"), 0);
  SchemeSpec reference = c.spec;
  reference.execution = ExecutionPreference::reference;
  const QuantizedModel q = quantize_model(c.full, reference);
  const at::Tensor nll_full = test::token_nll(c.full, held_out), nll_q = test::token_nll(q.model, held_out);
  const at::Tensor d = nll_q - nll_full;
  const double dnll = d.mean().item<double>();
  const double se = d.std().item<double>() / std::sqrt(static_cast<double>(d.numel()));
  const double llmc_nll = j.at("held_out").at("nll").get<double>();
  const double llmc_dnll = llmc_nll - j.at("full_precision").at("nll").get<double>();
  ::testing::Test::RecordProperty("qeval_nll", fmt::format("{:.8f}", nll_q.mean().item<double>()));
  ::testing::Test::RecordProperty("llmc_nll", fmt::format("{:.8f}", llmc_nll));
  ::testing::Test::RecordProperty("qeval_dnll", fmt::format("{:.6f}", dnll));
  ::testing::Test::RecordProperty("qeval_dnll_se", fmt::format("{:.6f}", se));
  ::testing::Test::RecordProperty("llmc_dnll", fmt::format("{:.6f}", llmc_dnll));
  EXPECT_LT(std::abs(dnll - llmc_dnll), se) << "qeval " << dnll << " ± " << se << ", llm-compressor " << llmc_dnll;
  // Far inside it: equal codes and norms give the same function (float32 orders only). Taking the
  // search's first point everywhere (every scale 1) still passes the line above on this model
  // (+0.1010 against +0.1127), not this one.
  EXPECT_NEAR(nll_q.mean().item<double>(), llmc_nll, 1e-4);
}

}  // namespace
}  // namespace qeval
