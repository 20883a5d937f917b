// GPTQ end to end on a real model (issue 77 item 5): qeval's calibration pass
// (eval/weight_calibration_pass.h) on stories260K gives llm-compressor 0.14's own codes, linear by
// linear, from the same calibration token ids.
//
// tests/oracle/make_gptq_model_fixtures.py converted stories260K.bin to a Hugging Face
// LlamaForCausalLM (q/k rows permuted for HF's rotate-half rotary, codes permuted back), ran
// llm-compressor's oneshot (SequentialPipeline, inferred) on 16 windows of 128 TinyStories tokens,
// each window one sample, and wrote tests/eval/fixtures/gptq_stories260k_llmc.json: the windows,
// every quantised linear's codes and scales, and the NLL of the converted model and of
// llm-compressor's fake-quantised models on 8 held-out windows.
//
// Two cases, because llm-compressor cannot run W4A16's group 128 on this model at all: every linear
// has K = 64 (its weight observer fails to unflatten 64 columns into groups of 128) or K = 172
// (validate_group_size_divisibility refuses K % 128 != 0), while qeval takes one group of 64 and
// groups of 128 + 44:
//   g128     qeval's gptq-w4-g128 without the down projections against llm-compressor per channel
//            without them: at K = 64 a group of 128 is one group of the row, i.e. per channel;
//   channel  qeval's gptq-w4 against llm-compressor per channel, all seven linears of each block.
// qeval's down projections under gptq-w4-g128 (the ragged 128 + 44) have no reference to compare.
//
// What may differ and why the limits below hold: the scales come from the original weights alone
// (group parameters "original", compressed-tensors' arithmetic), so they must be equal to the bit.
// The codes depend on H: llm-compressor sums (√2 x)(√2 x)ᵀ in float32 and divides by n, qeval sums
// x xᵀ in float64 and rounds 2/n · Σ to float32; the solves' matrix products sum in other orders.
// Such differences move a value across a rounding boundary only when it lies within a few float32
// ulps of one, and then the rest of that row may follow (the error is pushed right), and a changed
// layer changes every later layer's inputs. On this fixture every code and every scale is equal
// (both cases, all 65 linears); the limits (overall ≥ 99 %, each linear ≥ 97 %: about a row of a
// 32-row linear) leave room for another BLAS, and still fail round to nearest with the same scales,
// which agrees with GPTQ on only 86-87 % of the codes (75-83 % on the worst linear).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/files.h"
#include "eval/evaluator.h"
#include "eval/weight_calibration_pass.h"
#include "kernels/w4_gemm.h"
#include "model/linear.h"
#include "model/transformer.h"
#include "quant/calibrated_weights.h"
#include "quant/quantized_linear.h"
#include "quant/schemes/presets.h"
#include "tests/eval/stories260k_end_to_end.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

const nlohmann::json& fixture() {
  static const nlohmann::json j =
      nlohmann::json::parse(read_file(test::repo_path("tests/eval/fixtures/gptq_stories260k_llmc.json")));
  return j;
}

using test::stories260k;
using test::token_nll;
using test::windows_of;

// The model as the scheme executes it: each selected linear from its calibrated codes.
Transformer with_calibrated_codes(const Transformer& full, const SchemeSpec& spec) {
  Transformer model = full;
  for (const NamedLinear& l : full.linears()) {
    if (!spec.calibrated_weights->by_name.count(l.name)) continue;
    const auto* f = dynamic_cast<const FloatLinear*>(l.linear.get());
    model.replace_linear(
        l.name, std::make_shared<QuantizedLinear>(l.name, f->weight(), f->bias(), spec, ExecutionPath::reference));
  }
  return model;
}

TEST(GptqEndToEnd, TheConvertedHuggingFaceModelIsTheSameFunction) {
  // The fixture's full-precision NLLs come from transformers' LlamaForCausalLM on the converted
  // weights; qeval's llama2.c reader must give the same per window (float32 summation orders only).
  const nlohmann::json& j = fixture();
  const std::vector<Window> held_out = windows_of(j.at("held_out_windows"), 0);
  const at::Tensor nll = token_nll(stories260k(), held_out).view({static_cast<std::int64_t>(held_out.size()), -1});
  const auto expected = j.at("full_precision").at("per_window").get<std::vector<double>>();
  ASSERT_EQ(expected.size(), held_out.size());
  for (std::size_t i = 0; i < held_out.size(); ++i)
    EXPECT_NEAR(nll[static_cast<std::int64_t>(i)].mean().item<double>(), expected[i], 1e-5) << "window " << i;
}

struct Agreement {
  std::int64_t same = 0, total = 0;
};

// The fixture's scales of one linear: [N, G] float32 (written as doubles, exact).
at::Tensor expected_scales_of(const nlohmann::json& linear, std::int64_t N, std::int64_t G) {
  return at::tensor(linear.at("scales").get<std::vector<double>>(), at::kDouble).to(at::kFloat).view({N, G});
}

void codes_equal_llm_compressors(const std::string& case_name) {
  const nlohmann::json& j = fixture();
  const nlohmann::json& c = j.at("cases").at(case_name);
  const std::vector<Window> calibration = windows_of(j.at("calibration_windows"), 8);
  const std::vector<Window> held_out = windows_of(j.at("held_out_windows"), 0);
  const Transformer full = stories260k();

  SchemeSpec spec = resolve_scheme(c.at("qeval_scheme"));
  spec.weights.gptq->windows = static_cast<std::int64_t>(calibration.size());
  spec.exclude = c.at("exclude").get<std::vector<std::string>>();
  auto reader = transformer_reader(full);
  WeightCalibrator calibrator(*reader, [&](std::int64_t n) {
    EXPECT_EQ(n, static_cast<std::int64_t>(calibration.size()));
    return CalibrationWindows{calibration, {{"data", "tests/eval/fixtures/gptq_stories260k_llmc.json"}}};
  });
  spec.calibrated_weights = calibrator.weights_for(spec);
  const auto& solved = spec.calibrated_weights->by_name;
  ASSERT_EQ(solved.size(), c.at("linears").size()) << "qeval and llm-compressor quantise the same linears";

  Agreement overall, round_to_nearest;
  for (const auto& [name, ref] : c.at("linears").items()) {
    SCOPED_TRACE(case_name + " " + name);
    ASSERT_TRUE(solved.count(name));
    const CalibratedWeight& got = solved.at(name);
    ASSERT_TRUE(got.w4.has_value());
    const std::int64_t N = ref.at("shape")[0], K = ref.at("shape")[1], G = ref.at("groups");
    const at::Tensor codes = kernels::unpack_u4(got.w4->qweight, K).contiguous();  // [N, K] uint8
    ASSERT_EQ(codes.size(0), N);
    ASSERT_EQ(got.w4->scales.size(1), G);
    EXPECT_TRUE(got.w4->zeros.eq(8).all().item<bool>()) << "symmetric codes are stored with zero 8";
    const std::string hex = ref.at("codes");
    ASSERT_EQ(static_cast<std::int64_t>(hex.size()), N * K);
    const at::Tensor expected_scales = expected_scales_of(ref, N, G);
    // Round to nearest with the same scales, to show that the limits below can tell GPTQ from it.
    const at::Tensor per_column = expected_scales.repeat_interleave((K + G - 1) / G, 1).slice(1, 0, K);
    const at::Tensor rtn = (at::round(test::float_weight_of(full, name) / per_column).clamp(-8, 7) + 8).to(at::kByte).contiguous();
    Agreement a;
    std::int64_t first_difference = -1;
    for (std::int64_t i = 0; i < N * K; ++i) {
      const int expected = test::hex_digit(hex, static_cast<std::size_t>(i));
      if (codes.data_ptr<std::uint8_t>()[i] == expected)
        ++a.same;
      else if (first_difference < 0)
        first_difference = i;
      if (rtn.data_ptr<std::uint8_t>()[i] == expected) ++round_to_nearest.same;
    }
    a.total = N * K;
    round_to_nearest.total += N * K;
    overall.same += a.same;
    overall.total += a.total;
    // Scales: from the original weights only, the same float32 arithmetic: equal to the bit.
    const double scale_rel = ((got.w4->scales - expected_scales).abs() / expected_scales.abs()).max().item<double>();
    const double fraction = static_cast<double>(a.same) / static_cast<double>(a.total);
    ::testing::Test::RecordProperty(case_name + "." + name + ".codes_equal", fmt::format("{:.4f}", fraction));
    ::testing::Test::RecordProperty(case_name + "." + name + ".scales_max_rel_diff", fmt::format("{:.3g}", scale_rel));
    EXPECT_GE(fraction, 0.97) << a.same << " of " << a.total << " codes equal; first different at row "
                              << first_difference / K << " column " << first_difference % K;
    EXPECT_TRUE(test::tensors_equal(got.w4->scales, expected_scales));
  }
  const double fraction = static_cast<double>(overall.same) / static_cast<double>(overall.total);
  ::testing::Test::RecordProperty(case_name + ".codes_equal", fmt::format("{:.6f}", fraction));
  EXPECT_GE(fraction, 0.99) << overall.same << " of " << overall.total << " codes equal";
  const double rtn_fraction = static_cast<double>(round_to_nearest.same) / static_cast<double>(round_to_nearest.total);
  ::testing::Test::RecordProperty(case_name + ".round_to_nearest_codes_equal", fmt::format("{:.4f}", rtn_fraction));
  EXPECT_LT(rtn_fraction, 0.97) << "round to nearest would pass: the limits could not tell GPTQ from it";

  // The held-out NLL of qeval's codes against llm-compressor's fake-quantised model on the same
  // tokens: equal codes give the same function, so the difference must be far inside the paired
  // standard error (over tokens) of the scheme's ΔNLL against full precision.
  const at::Tensor nll_full = token_nll(full, held_out);
  const at::Tensor nll_q = token_nll(with_calibrated_codes(full, spec), held_out);
  const at::Tensor d = nll_q - nll_full;
  const double dnll = d.mean().item<double>();
  const double se = d.std().item<double>() / std::sqrt(static_cast<double>(d.numel()));
  const double llmc_dnll = c.at("held_out").at("nll").get<double>() - j.at("full_precision").at("nll").get<double>();
  ::testing::Test::RecordProperty(case_name + ".qeval_dnll", fmt::format("{:.6f}", dnll));
  ::testing::Test::RecordProperty(case_name + ".qeval_dnll_se", fmt::format("{:.6f}", se));
  ::testing::Test::RecordProperty(case_name + ".llmc_dnll", fmt::format("{:.6f}", llmc_dnll));
  EXPECT_LT(std::abs(dnll - llmc_dnll), se) << "qeval " << dnll << " ± " << se << ", llm-compressor " << llmc_dnll;
  ::testing::Test::RecordProperty(case_name + ".qeval_nll", fmt::format("{:.8f}", nll_q.mean().item<double>()));
  ::testing::Test::RecordProperty(case_name + ".llmc_nll",
                                  fmt::format("{:.8f}", c.at("held_out").at("nll").get<double>()));
  EXPECT_NEAR(nll_q.mean().item<double>(), c.at("held_out").at("nll").get<double>(), 1e-4);
}

TEST(GptqEndToEnd, GptqW4G128WithoutDownProjectionsEqualsLlmCompressor) { codes_equal_llm_compressors("g128"); }

TEST(GptqEndToEnd, GptqW4EqualsLlmCompressorPerChannel) { codes_equal_llm_compressors("channel"); }

}  // namespace
}  // namespace qeval
