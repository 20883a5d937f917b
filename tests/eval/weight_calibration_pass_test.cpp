// GPTQ's calibration pass (eval/weight_calibration_pass.h): layer 0 is solved on the Hessians of
// full precision's inputs, every later layer on the inputs that the scheme's own quantised layers
// produce (the sequential loop of llm-compressor and AutoGPTQ), checked against the same solve
// driven through Transformer::forward with recording linears; the scheme executes those codes.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "eval/evaluator.h"
#include "eval/weight_calibration_pass.h"
#include "kernels/w4_gemm.h"
#include "model/transformer.h"
#include "quant/calibration/gptq_weights.h"
#include "quant/calibration/gptq_solve.h"
#include "quant/quantized_linear.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

// Sums x xᵀ (float64) of every input a linear sees.
class RecordingLinear final : public Linear {
 public:
  RecordingLinear(std::shared_ptr<const Linear> inner, at::Tensor* sum, std::int64_t* samples)
      : inner_(std::move(inner)), sum_(sum), samples_(samples) {}
  at::Tensor forward(const at::Tensor& x) const override {
    const at::Tensor rows = x.reshape({-1, x.size(-1)}).to(at::kDouble);
    *sum_ += rows.t().mm(rows);
    *samples_ += x.size(0);
    return inner_->forward(x);
  }
  std::int64_t in_features() const override { return inner_->in_features(); }
  std::int64_t out_features() const override { return inner_->out_features(); }
  std::int64_t weight_bytes() const override { return inner_->weight_bytes(); }
  std::string describe() const override { return "recording"; }
  std::shared_ptr<const Linear> placed(PlacementCache&) const override { return nullptr; }

 private:
  std::shared_ptr<const Linear> inner_;
  at::Tensor* sum_;
  std::int64_t* samples_;
};

std::vector<Window> random_windows(std::int64_t n, std::int64_t L, std::int64_t vocab) {
  at::manual_seed(11);
  std::vector<Window> windows;
  for (std::int64_t i = 0; i < n; ++i) {
    Window w;
    w.index = 100 + i;
    const at::Tensor t = at::randint(3, vocab, {L}, at::kLong);
    for (std::int64_t l = 0; l < L; ++l) w.tokens.push_back(static_cast<std::int32_t>(t[l].item<std::int64_t>()));
    windows.push_back(w);
  }
  return windows;
}

SchemeSpec gptq_spec(const std::string& preset, std::int64_t windows, std::int64_t group) {
  SchemeSpec spec = resolve_scheme(preset);
  spec.weights.gptq->windows = windows;
  if (group > 0) spec.weights.group_size = group;
  return spec;
}

// The independent route: layer by layer, the whole model's forward with the layers before
// quantised from the codes solved so far, and recorders on this layer's linears.
std::map<std::string, CalibratedWeight> solve_through_forward(const Transformer& full, const SchemeSpec& spec,
                                                              const std::vector<Window>& windows,
                                                              bool propagate_quantised) {
  std::map<std::string, CalibratedWeight> solved;
  auto made = std::make_shared<CalibratedWeights>();
  SchemeSpec with = spec;
  with.calibrated_weights = made;
  for (std::int64_t layer = 0; layer < full.config().n_layers; ++layer) {
    Transformer model = full;
    if (propagate_quantised)
      for (const NamedLinear& l : full.linears())
        if (made->by_name.count(l.name)) {
          const auto* f = dynamic_cast<const FloatLinear*>(l.linear.get());
          model.replace_linear(l.name, std::make_shared<QuantizedLinear>(l.name, f->weight(), f->bias(), with,
                                                                         ExecutionPath::reference));
        }
    std::map<std::string, at::Tensor> sums;
    std::map<std::string, std::int64_t> samples;
    for (const NamedLinear& l : full.blocks()[static_cast<std::size_t>(layer)].linears()) {
      sums[l.name] = at::zeros({l.linear->in_features(), l.linear->in_features()}, at::kDouble);
      samples[l.name] = 0;
      model.replace_linear(l.name, std::make_shared<RecordingLinear>(l.linear, &sums[l.name], &samples[l.name]));
    }
    for (const Window& w : windows) {
      at::Tensor tokens = at::empty({1, static_cast<std::int64_t>(w.tokens.size())}, at::kLong);
      for (std::size_t i = 0; i < w.tokens.size(); ++i) tokens[0][static_cast<std::int64_t>(i)] = w.tokens[i];
      model.forward(tokens);
    }
    for (const NamedLinear& l : full.blocks()[static_cast<std::size_t>(layer)].linears()) {
      const auto* f = dynamic_cast<const FloatLinear*>(l.linear.get());
      const at::Tensor H = (sums[l.name] * (2.0 / static_cast<double>(samples[l.name]))).to(at::kFloat);
      const GptqResult r = gptq_solve(f->weight(), H, gptq_options(spec.weights), l.name);
      made->by_name[l.name] = calibrated_weight(r, spec.weights, l.name);
      solved[l.name] = made->by_name[l.name];
    }
  }
  return solved;
}

at::Tensor codes_of(const CalibratedWeight& c) {
  return c.w4 ? c.w4->qweight : c.dequantized;
}

TEST(WeightCalibrationPass, EachLayerIsSolvedOnTheOutputsOfTheSchemesQuantisedLayersBeforeIt) {
  const Transformer model = test::random_transformer(5, false, 64, 32, 3);
  const std::vector<Window> windows = random_windows(6, 24, 64);
  const SchemeSpec spec = gptq_spec("gptq-w4-g128", 6, 16);
  auto reader = transformer_reader(model);
  std::int64_t asked = 0;
  WeightCalibrator calibrator(*reader, [&](std::int64_t n) {
    asked = n;
    return CalibrationWindows{windows, {{"data", "random test windows"}}};
  });
  const std::shared_ptr<const CalibratedWeights> pass = calibrator.weights_for(spec);
  EXPECT_EQ(asked, 6);
  const auto sequential = solve_through_forward(model, spec, windows, true);
  const auto from_full = solve_through_forward(model, spec, windows, false);
  ASSERT_EQ(pass->by_name.size(), sequential.size());
  std::int64_t later_layers_that_differ_from_full_inputs = 0;
  for (const auto& [name, expected] : sequential) {
    ASSERT_TRUE(pass->by_name.count(name)) << name;
    const CalibratedWeight& got = pass->by_name.at(name);
    ASSERT_TRUE(got.w4.has_value()) << name << ": groups of consecutive columns run on the 4-bit kernels";
    EXPECT_TRUE(test::tensors_equal(got.w4->qweight, expected.w4->qweight)) << name;
    EXPECT_TRUE(test::tensors_equal(got.w4->scales, expected.w4->scales)) << name;
    EXPECT_TRUE(test::tensors_equal(got.w4->zeros, expected.w4->zeros)) << name;
    const bool layer0 = name.rfind("layers.0.", 0) == 0;
    const bool same_as_full_inputs = codes_of(got).equal(codes_of(from_full.at(name)));
    if (layer0) EXPECT_TRUE(same_as_full_inputs) << name << ": layer 0 sees full precision's inputs";
    if (!layer0 && !same_as_full_inputs) ++later_layers_that_differ_from_full_inputs;
  }
  // The route through full precision's own outputs would give other codes: the test can tell.
  EXPECT_GT(later_layers_that_differ_from_full_inputs, 0);
  // The record's account: every linear with its loss, each from all six windows.
  const nlohmann::json& d = pass->description;
  EXPECT_EQ(d.at("method"), "gptq");
  EXPECT_EQ(d.at("windows"), 6);
  EXPECT_EQ(d.at("window_hashes").size(), 6u);
  ASSERT_EQ(d.at("layers").size(), sequential.size());
  // Linears that read one input share its Hessian (k and v q's, up gate's); the codes above show the sum is the same.
  std::set<std::string> names;
  for (const nlohmann::json& l : d.at("layers")) names.insert(l.at("name").get<std::string>());
  std::int64_t shared = 0;
  for (const nlohmann::json& l : d.at("layers")) {
    const std::string name = l.at("name").get<std::string>();
    const std::string prefix = name.substr(0, name.rfind('.', name.rfind('.') - 1) + 1);  // "layers.3."
    std::string expected = name;
    if (name == prefix + "attn.k" || name == prefix + "attn.v") expected = prefix + "attn.q";
    if (name == prefix + "mlp.up" && names.count(prefix + "mlp.gate")) expected = prefix + "mlp.gate";
    EXPECT_EQ(l.at("hessian_of"), expected) << l.dump();
    shared += expected != name;
  }
  EXPECT_GT(shared, 0) << "no linear shares an input here: the test would not see a shared sum";
  for (const nlohmann::json& l : d.at("layers")) {
    EXPECT_EQ(l.at("samples"), 6) << l.dump();
    EXPECT_GT(l.at("loss").get<double>(), 0) << l.dump();
    EXPECT_FALSE(l.at("fell_back_to_rtn").get<bool>()) << l.dump();
  }
  // Asked again for the same weights: the same calibration, not a second pass.
  EXPECT_EQ(calibrator.weights_for(spec).get(), pass.get());
}

TEST(WeightCalibrationPass, TheSchemeRunsTheSolvedCodesOnBothPaths) {
  const Transformer model = test::random_transformer(6, false, 64, 32, 2);
  const std::vector<Window> windows = random_windows(4, 16, 64);
  auto reader = transformer_reader(model);
  WeightCalibrator calibrator(*reader, [&](std::int64_t) { return CalibrationWindows{windows, {}}; });
  for (const std::string preset : {"gptq-w4-g128", "gptq-w4-g128-desc", "gptq-w3-g128", "gptq-w4"}) {
    SchemeSpec spec = gptq_spec(preset, 4, preset == "gptq-w4" ? 0 : 16);
    spec.calibrated_weights = calibrator.weights_for(spec);
    const bool g_idx = spec.weights.gptq->actorder == GptqActOrder::group;
    EXPECT_EQ(kernel_path_unavailable_reason(spec).empty(), !g_idx) << preset;
    const NamedLinear& l = model.blocks()[1].linears()[0];
    const auto* f = dynamic_cast<const FloatLinear*>(l.linear.get());
    const CalibratedWeight& c = spec.calibrated_weights->by_name.at(l.name);
    const QuantizedLinear reference(l.name, f->weight(), f->bias(), spec, ExecutionPath::reference);
    EXPECT_TRUE(test::tensors_equal(reference.dequantized_weight(), c.dequantize())) << preset;
    EXPECT_FALSE(reference.dequantized_weight().equal(f->weight())) << preset;
    const at::Tensor x = at::randn({2, 5, l.linear->in_features()});
    const at::Tensor expected = at::matmul(x, c.dequantize().t());
    EXPECT_TRUE(test::tensors_close(reference.forward(x), expected, 1e-5, 1e-5)) << preset;
    if (!g_idx) {
      const QuantizedLinear kernel(l.name, f->weight(), f->bias(), spec, ExecutionPath::kernel);
      EXPECT_TRUE(test::tensors_close(kernel.forward(x), expected, 1e-4, 1e-4)) << preset;
    }
    // Packed bytes: b bits per code (b / 8 bytes), float32 scales and zeros (and the g_idx).
    const int bits = spec.weights.bits();
    EXPECT_EQ(bits, preset == "gptq-w3-g128" ? 3 : 4) << preset;
    const std::int64_t N = l.linear->out_features(), K = l.linear->in_features();
    const std::int64_t G = spec.weights.granularity == Granularity::group ? (K + 15) / 16 : 1;
    EXPECT_EQ(reference.weight_bytes(), N * K * bits / 8 + 8 * N * G + (g_idx ? 4 * K : 0)) << preset;
    // The codes span the b-bit range and no more: (w − zero·s) / s takes 2^b values per group.
    if (!g_idx) {
      const at::Tensor codes = kernels::unpack_u4(c.w4->qweight, K);
      EXPECT_EQ(codes.max().item<int>(), (1 << bits) - 1) << preset;
      EXPECT_EQ(codes.min().item<int>(), 0) << preset;
    }
  }
}

TEST(WeightCalibrationPass, ASchemeWithoutItsCalibratedWeightsIsRefused) {
  const Transformer model = test::random_transformer(7, false, 64, 32, 1);
  const SchemeSpec spec = gptq_spec("gptq-w4-g128", 2, 16);
  const NamedLinear& l = model.blocks()[0].linears()[0];
  const auto* f = dynamic_cast<const FloatLinear*>(l.linear.get());
  EXPECT_TRUE(test::throws_with([&] { QuantizedLinear(l.name, f->weight(), f->bias(), spec, ExecutionPath::reference); },
                                {l.name, "GPTQ", "no calibrated weight"}));
}

}  // namespace
}  // namespace qeval
