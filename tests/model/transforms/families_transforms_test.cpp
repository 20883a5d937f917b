// Schemes, rotate and smooth on every family's fixture (tests/model/fixtures): the schemes find
// every block linear (fused or not); the full-precision logits
// stay the same where the transform handles the family's switches exactly (q/k norms, (1 + w)
// gains made plain on load, parallel residual, fused qkv and gate_up, q/k/v biases, learned
// positions), and rotate refuses Gemma-3's sandwich norms with a message naming them.
#include <gtest/gtest.h>

#include <set>

#include "eval/model_transforms.h"
#include "eval/sensitivity.h"
#include "loaders/checkpoints/checkpoint.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/spec.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

Transformer load(const std::string& folder) {
  LoadedCheckpoint c = load_checkpoint(test::repo_path("tests/model/fixtures/" + folder));
  return Transformer(c.config, c.weights, folder);
}

at::Tensor tokens(std::int64_t vocab, std::int64_t batch, std::int64_t length, std::uint64_t seed) {
  at::manual_seed(seed);
  return at::randint(vocab, {batch, length}, at::kLong);
}

Transformer transformed(const Transformer& model, const std::vector<std::string>& specs) {
  std::vector<TransformSpec> parsed;
  for (const auto& s : specs) parsed.push_back(parse_transform(s));
  CalibrationSource calibration = [&](const std::string&, std::int64_t n) {  // equivalence holds for any calibration
    CalibrationWindows c;
    at::Tensor t = tokens(model.config().vocab_size, n, 12, 99);
    for (std::int64_t i = 0; i < n; ++i) {
      Window w;
      w.index = i;
      for (std::int64_t j = 0; j < t.size(1); ++j) w.tokens.push_back(static_cast<std::int32_t>(t[i][j].item<std::int64_t>()));
      c.windows.push_back(w);
    }
    c.description = {{"windows", n}};
    return c;
  };
  nlohmann::json report;
  return apply_transforms(model, parsed, calibration, report);
}

double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / b.to(at::kDouble).abs().max().item<double>();
}

class FamilyTransforms : public ::testing::TestWithParam<const char*> {};

TEST_P(FamilyTransforms, KeepTheFunction) {
  const Transformer model = load(GetParam());
  const at::Tensor ids = tokens(model.config().vocab_size, 2, 12, 5);
  const at::Tensor reference = model.forward(ids);
  std::vector<std::vector<std::string>> runs{{"smooth"}, {"smooth:alpha=0.85,groups=qkv+up+down+o"}};
  if (!model.config().sandwich_norms) {
    runs.push_back({"rotate"});
    runs.push_back({"rotate:kind=orthogonal,seed=3"});
    runs.push_back({"rotate", "smooth"});
  }
  for (const auto& specs : runs) {
    std::string label;
    for (const auto& s : specs) label += s + " ";
    EXPECT_LT(relative_difference(transformed(model, specs).forward(ids), reference), 1e-5) << GetParam() << ": " << label;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FamilyTransforms,
                         ::testing::Values("tiny-qwen2-hf", "tiny-qwen3-hf", "tiny-mistral-hf", "tiny-gemma3-hf",
                                           "tiny-phi3-hf", "tiny-gpt-neox-hf", "tiny-opt-hf"),
                         [](const auto& info) {
                           std::string name = std::string(info.param).substr(5);  // without "tiny-"
                           for (auto& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// Schemes see each family's linears as the checkpoint stores them: fused qkv / gate_up are one unit.
TEST_P(FamilyTransforms, SchemesQuantiseEveryBlockLinear) {
  const Transformer model = load(GetParam());
  const QuantizedModel q = quantize_model(model, preset_scheme("int8-moderate"));
  EXPECT_EQ(q.report.at("quantized_layers").get<std::size_t>(), model.linears().size() - 1);  // all but lm_head
  std::set<std::string> kinds;
  for (const auto& l : model.linears()) kinds.insert(linear_kind(l.name));
  const ModelConfig& c = model.config();
  EXPECT_EQ(kinds.count("attn.qkv"), c.fused_qkv ? 1u : 0u);
  EXPECT_EQ(kinds.count("mlp.gate_up"), c.fused_gate_up ? 1u : 0u);
  EXPECT_EQ(kinds.count("mlp.gate"), c.gated_mlp() && !c.fused_gate_up ? 1u : 0u);
  const at::Tensor ids = tokens(c.vocab_size, 1, 12, 6);
  const at::Tensor full = model.forward(ids), quantised = q.model.forward(ids);
  EXPECT_TRUE(quantised.isfinite().all().item<bool>());
  EXPECT_GT((quantised - full).abs().max().item<double>(), 0.0);  // the rewrite took effect
}

TEST(FamilyTransforms, RotateRefusesSandwichNormsNamingThem) {
  const Transformer gemma = load("tiny-gemma3-hf");
  EXPECT_TRUE(test::throws_with([&] { transformed(gemma, {"rotate"}); }, {"rotate", "sandwich norms", "Gemma-3"}));
}

}  // namespace
}  // namespace qeval
