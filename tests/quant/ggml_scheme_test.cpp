// Kind ggml (issue 64, quant/schemes/ggml_rules.h): llama-quantize's choice of each tensor's type, the
// layer's weight (the GGUF round trip, dequantised once) and its bytes, bad input refused naming
// the tensor, and whole evaluations: a gguf-* preset on a model equals `full` on the model whose
// weights (embedding and head included) are the types' round trips.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/error.h"
#include "eval/evaluator.h"
#include "eval/schemes.h"
#include "model/block.h"
#include "quant/formats/ggml/quants.h"
#include "quant/schemes/ggml_rules.h"
#include "quant/quantized_linear.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "tests/support/test_data.h"
#include "tests/support/plan_runs.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

// Expects `fn` to throw qeval::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<std::string> parts) {
  EXPECT_TRUE(test::throws_with(fn, parts));
}

// stories260K's shape: d 64, ffn 172, 5 layers, 8 heads / 4 kv heads, separate output.
ModelConfig stories_config() {
  ModelConfig c;
  c.vocab_size = 512, c.d_model = 64, c.d_ff = 172, c.n_layers = 5, c.n_heads = 8, c.n_kv_heads = 4;
  c.max_seq_len = 128, c.norm = NormKind::rmsnorm, c.position = PositionKind::rope, c.mlp = MlpKind::swiglu;
  return c;
}

// Rows that are multiples of 256, 8 layers, GQA ratio 4, tied embedding.
ModelConfig tiny256_config() {
  ModelConfig c = stories_config();
  c.d_model = 256, c.d_ff = 256, c.n_layers = 8, c.n_heads = 8, c.n_kv_heads = 2, c.tied_embeddings = true;
  return c;
}

std::map<std::string, std::string> types_of(const std::string& preset, const ModelConfig& c) {
  SchemeSpec spec = resolve_scheme(preset);
  GgmlTypePlan plan(spec, model_linear_names(c), c);
  std::map<std::string, std::string> out;
  out["token_embedding"] = ggml_type_label(plan.choose("token_embedding", c.d_model).type);
  for (const auto& name : model_linear_names(c)) {
    const bool down = name.find("mlp.down") != std::string::npos;
    out[name] = ggml_type_label(plan.choose(name, down ? c.d_ff : c.d_model).type);
  }
  return out;
}

TEST(GgmlScheme, ChoosesEachTensorsTypeAsLlamaQuantize) {
  // Rows of 256·k: Q4_K_M's use_more_bits layers (8 layers: 0, 3, 6, 7) take Q6_K for attn_v and
  // ffn_down; the tied table takes the output rule (Q6_K).
  auto t = types_of("gguf-q4_k_m", tiny256_config());
  for (int i = 0; i < 8; ++i) {
    const bool more = i == 0 || i == 3 || i == 6 || i == 7;
    EXPECT_EQ(t["layers." + std::to_string(i) + ".attn.v"], more ? "Q6_K" : "Q4_K") << i;
    EXPECT_EQ(t["layers." + std::to_string(i) + ".mlp.down"], more ? "Q6_K" : "Q4_K") << i;
    EXPECT_EQ(t["layers." + std::to_string(i) + ".attn.k"], "Q4_K") << i;
  }
  EXPECT_EQ(t["token_embedding"], "Q6_K");
  EXPECT_EQ(t["lm_head"], "Q6_K");
  // Q4_K_S: the first four attn_v and the first eighth's ffn_down (layer 0) Q5_K.
  t = types_of("gguf-q4_k_s", tiny256_config());
  EXPECT_EQ(t["layers.3.attn.v"], "Q5_K");
  EXPECT_EQ(t["layers.4.attn.v"], "Q4_K");
  EXPECT_EQ(t["layers.0.mlp.down"], "Q5_K");
  EXPECT_EQ(t["layers.1.mlp.down"], "Q4_K");
  // IQ4_NL: GQA ratio 4 -> attn_v Q5_K; first eighth's ffn_down Q5_K; output Q6_K.
  t = types_of("gguf-iq4_nl", tiny256_config());
  EXPECT_EQ(t["layers.5.attn.v"], "Q5_K");
  EXPECT_EQ(t["layers.0.mlp.down"], "Q5_K");
  EXPECT_EQ(t["layers.1.mlp.down"], "IQ4_NL");
  EXPECT_EQ(t["lm_head"], "Q6_K");
  // MXFP4_MOE on a dense model: Q8_0 everywhere.
  for (const auto& [name, type] : types_of("gguf-mxfp4-moe", tiny256_config())) EXPECT_EQ(type, "Q8_0") << name;

  // stories260K: 64-wide rows fall back (Q4_K -> Q5_0, Q6_K -> Q8_0), the 172-wide ffn_down is F16
  // in every file type; the separate embedding takes the default (then its fallback).
  for (const char* preset : {"gguf-q8_0", "gguf-q6_k", "gguf-q5_k_m", "gguf-q4_k_m", "gguf-q4_k_s", "gguf-q4_0",
                             "gguf-iq4_nl", "gguf-mxfp4-moe"}) {
    t = types_of(preset, stories_config());
    for (int i = 0; i < 5; ++i) EXPECT_EQ(t["layers." + std::to_string(i) + ".mlp.down"], "F16") << preset;
  }
  t = types_of("gguf-q4_k_m", stories_config());
  EXPECT_EQ(t["layers.1.attn.q"], "Q5_0");
  EXPECT_EQ(t["layers.0.attn.v"], "Q5_0");  // 5 layers: use_more_bits picks 2 and 4 only
  EXPECT_EQ(t["layers.2.attn.v"], "Q8_0");  // Q6_K by use_more_bits, then its fallback
  EXPECT_EQ(t["lm_head"], "Q8_0");          // 64 % 256: the output rule's Q8_0
  EXPECT_EQ(t["token_embedding"], "Q5_0");
  t = types_of("gguf-q5_k_m", stories_config());
  EXPECT_EQ(t["layers.1.attn.q"], "Q5_1");
}

TEST(GgmlScheme, TensorTypesOverrideByPattern) {
  const ModelConfig c = tiny256_config();
  SchemeSpec spec = resolve_scheme("gguf-q4_k_m");
  spec.tensor_types = {{"layers.*.mlp.down", "Q8_0"}, {"layers.0.attn.v", "Q4_0"}};
  validate_scheme(spec, "test");
  GgmlTypePlan plan(spec, model_linear_names(c), c);
  EXPECT_EQ(plan.choose("layers.5.mlp.down", 256).type, GgmlType::Q8_0);
  EXPECT_EQ(plan.choose("layers.0.attn.v", 256).type, GgmlType::Q4_0);
  // As in llama.cpp, an overridden attn_v is not counted: layer 1's attn_v is the first seen (use_more_bits).
  EXPECT_EQ(plan.choose("layers.1.attn.v", 256).type, GgmlType::Q6_K);
  // ... so use_more_bits' middle layers shift by one: layer 3 (index 2) Q4_K, layer 4 (index 3) Q6_K.
  EXPECT_EQ(plan.choose("layers.3.attn.v", 256).type, GgmlType::Q4_K);
  EXPECT_EQ(plan.choose("layers.4.attn.v", 256).type, GgmlType::Q6_K);
}

TEST(GgmlScheme, RefusesBadInputNamingTheTensor) {
  auto parse = [](const std::string& text) { return scheme_from_json(nlohmann::json::parse(text), "spec.json"); };
  expect_error([&] { parse(R"({"weights": {"kind": "ggml", "type": "q4_x"}})"); }, {"spec.json", "q4_x", "q4_k"});
  expect_error([&] { parse(R"({"weights": {"kind": "ggml", "file_type": "q3_k_m"}})"); }, {"q3_k_m", "q4_k_m"});
  expect_error([&] { parse(R"({"weights": {"kind": "ggml"}})"); }, {"exactly one of"});
  EXPECT_TRUE(parse(R"({"weights": {"kind": "ggml", "type": "q8_0", "activations": "gguf-q8"}})").weights.ggml_q8_activations);
  expect_error([&] { parse(R"({"weights": {"kind": "ggml", "type": "q8_0", "activations": "q8"}})"); },
               {"spec.json", "activations 'q8'", "none, gguf-q8"});
  expect_error([&] { parse(R"({"weights": {"kind": "int8_absmax", "granularity": "channel"}, "tensor_types": {"lm_head": "q8_0"}})"); },
               {"tensor_types needs weights of kind ggml"});
  expect_error([&] { parse(R"({"input_activations": {"kind": "ggml", "type": "q8_0"}})"); }, {"weights only"});
  expect_error([&] { parse(R"({"weights": {"kind": "ggml", "type": "q8_0"}, "tensor_types": {"lm_head": "q9"}})"); },
               {"tensor_types['lm_head']", "q9"});

  const ModelConfig c = stories_config();
  SchemeSpec spec = resolve_scheme("gguf-q4_k_m");
  spec.tensor_types = {{"layers.*.mlp.dwn", "q8_0"}};
  expect_error([&] { GgmlTypePlan(spec, model_linear_names(c), c); }, {"layers.*.mlp.dwn", "matches no tensor", "layers.0.mlp.down"});
  // A 256-block type forced on 64-wide rows: refused naming the tensor (llama-quantize would fall back).
  spec.tensor_types = {{"layers.*.attn.q", "q4_k"}};
  GgmlTypePlan plan(spec, model_linear_names(c), c);
  expect_error([&] { plan.choose("layers.2.attn.q", 64); }, {"layers.2.attn.q", "64", "Q4_K", "256"});
  SchemeSpec forced = scheme_from_json(nlohmann::json::parse(R"({"weights": {"kind": "ggml", "type": "q6_k"}})"), "t");
  GgmlTypePlan all(forced, model_linear_names(c), c);
  expect_error([&] { all.choose("layers.0.mlp.down", 172); }, {"layers.0.mlp.down", "172", "Q6_K"});
  spec.tensor_types = {{"layers.*", "q8_0"}, {"layers.0.*", "q4_0"}};
  expect_error([&] { GgmlTypePlan(spec, model_linear_names(c), c); }, {"layers.0.", "two patterns"});
  // An override of a tensor the scheme keeps in full precision would change nothing: refused.
  SchemeSpec excluded = resolve_scheme("gguf-q4_k_m");
  excluded.exclude = {"layers.0.*"};
  excluded.tensor_types = {{"layers.0.attn.q", "q8_0"}};
  expect_error([&] { GgmlTypePlan(excluded, model_linear_names(c), c); },
               {"layers.0.attn.q", "does not quantise", "change nothing"});
  SchemeSpec no_head = scheme_from_json(nlohmann::json::parse(R"({"weights": {"kind": "ggml", "type": "q8_0"}})"), "t");
  no_head.tensor_types = {{"lm_head", "q4_0"}};
  expect_error([&] { GgmlTypePlan(no_head, model_linear_names(c), c); }, {"lm_head", "quantize_lm_head"});
}

TEST(GgmlScheme, LayerHoldsTheGgufRoundTripAndCountsBlockBytes) {
  at::manual_seed(5);
  const at::Tensor w = at::randn({48, 512}), b = at::randn({48});
  for (const char* type : {"Q4_K", "Q6_K", "IQ4_NL", "MXFP4", "Q4_0", "F16"}) {
    SchemeSpec spec = scheme_from_json(nlohmann::json::parse(fmt::format(R"({{"weights": {{"kind": "ggml", "type": "{}"}}}})", type)), "t");
    QuantizedLinear q("layers.0.attn.q", w, b, spec, ExecutionPath::reference);
    const GgmlType t = ggml_type_from_json_name(type, "t", false);
    EXPECT_TRUE(at::equal(q.dequantized_weight(), ggml_round_trip(w, t))) << type;
    if (t != GgmlType::F16) EXPECT_TRUE(at::equal(q.dequantized_weight(), quantize_dequantize_ggml(w, t))) << type;
    EXPECT_EQ(q.weight_bytes(), ggml_tensor_bytes(t, 48, 512) + 48 * 4) << type;
    EXPECT_NE(q.describe().find(std::string("ggml-") + type), std::string::npos) << q.describe();
  }
  EXPECT_EQ(ggml_tensor_bytes(GgmlType::Q4_K, 2, 512), 2 * 2 * 144);
}

// The model with every weight a gguf-* preset quantises replaced by its round trip: `full` on it is
// what a GGUF of that file type holds.
Transformer round_tripped(const Transformer& m, const nlohmann::json& report) {
  ModelWeights w = m.weights();
  std::map<std::string, GgmlType> types;
  for (const auto& layer : report.at("layers"))
    types[layer.at("name")] = ggml_type_from_json_name(layer.at("ggml_type"), "t", true);
  w.token_embedding = ggml_round_trip(w.token_embedding, types.at("token_embedding"));
  w.lm_head = m.config().tied_embeddings ? w.token_embedding : ggml_round_trip(w.lm_head, types.at("lm_head"));
  for (std::size_t i = 0; i < w.blocks.size(); ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    BlockWeights& b = w.blocks[i];
    for (auto [name, lw] : std::vector<std::pair<std::string, LinearWeights*>>{
             {"attn.q", &b.q}, {"attn.k", &b.k}, {"attn.v", &b.v}, {"attn.o", &b.o}, {"mlp.gate", &b.gate},
             {"mlp.up", &b.up}, {"mlp.down", &b.down}})
      lw->weight = ggml_round_trip(lw->weight, types.at(p + name));
  }
  return Transformer(m.config(), w, "round-tripped");
}

TEST(GgmlScheme, PresetEqualsFullOnTheRoundTrippedModel) {
  // d 256 (rows of 256), ffn 768, untied head.
  const Transformer m = test::random_transformer(11, false, 300, 256, 2);
  for (const char* preset : {"gguf-q4_k_m", "gguf-iq4_nl", "gguf-q4_0"}) {
    auto reader = transformer_reader(m);
    test::PlanRunSetup setup;
    setup.schemes = {"full", preset};
    const test::PlanRun run = test::evaluate_over_plan(*reader, test::plan_of("resident", 0), 2, setup);
    const nlohmann::json& report = run.prepared.schemes[1].description;
    ASSERT_TRUE(report.contains("layers")) << report.dump();
    EXPECT_EQ(report.at("layers").at(0).at("name"), "token_embedding");
    const Transformer rt = round_tripped(m, report);
    auto rt_reader = transformer_reader(rt);
    setup.schemes = {"full"};
    const test::PlanRun ref = test::evaluate_over_plan(*rt_reader, test::plan_of("resident", 0), 2, setup);
    ASSERT_EQ(run.result.schemes[1].rows.size(), ref.result.schemes[0].rows.size());
    for (const auto& [w, row] : ref.result.schemes[0].rows) {
      const double got = run.result.schemes[1].rows.at(w).nll_sum, want = row.nll_sum;
      EXPECT_NEAR(got, want, 1e-6 * std::abs(want)) << preset << " window " << w;
    }
  }
}

}  // namespace
}  // namespace qeval
