// An artifact beside its parent (eval/artifact_scheme.h, `eval --compare-checkpoint`): the
// artifact's row is the artifact evaluated alone, bit for bit, under every plan (its embedding,
// norms and head are its own); a copy of the parent is full precision exactly, with weight errors
// of 0; folded scales (AWQ, SmoothQuant) leave the bases that reach the output unchanged while
// every stored tensor moves; an artifact whose shapes or config differ is refused naming the
// first difference. The parent is the tiny Llama of ../shared/data/fixtures (2 layers, d_model 64,
// 8 heads, 2 kv heads, untied head).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "eval/artifact_scheme.h"
#include "eval/evaluator.h"
#include "eval/schemes.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/model_reader.h"
#include "loaders/checkpoints/qeval_checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "loaders/protocols/protocol.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path parent_dir() { return test::data_path("fixtures/tiny-llama-hf"); }

std::map<std::string, at::Tensor> parent_tensors() {
  std::map<std::string, at::Tensor> all;
  for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
    for (auto& [name, t] : read_safetensors(parent_dir() / shard)) all[name] = t.clone();
  return all;
}

// The parent's folder with its tensors (and config) edited.
fs::path write_artifact(const test::TempDir& dir, const std::map<std::string, at::Tensor>& tensors,
                        const std::function<void(json&)>& edit_config = {}) {
  json config = json::parse(read_file(parent_dir() / "config.json"));
  if (edit_config) edit_config(config);
  write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(dir / "config.json", config.dump(2));
  return dir.path();
}

std::vector<Window> random_windows(std::int64_t n, std::int64_t length, std::int64_t vocab) {
  at::manual_seed(78);
  const at::Tensor ids = at::randint(vocab, {n, length}, at::kLong);
  std::vector<Window> out;
  for (std::int64_t w = 0; w < n; ++w) {
    Window window;
    window.index = w;
    window.first_scored = 1;
    for (std::int64_t t = 0; t < length; ++t) window.tokens.push_back(static_cast<std::int32_t>(ids[w][t].item<std::int64_t>()));
    out.push_back(window);
  }
  return out;
}

EvalResult run(ModelReader& parent, std::vector<EvalScheme>& schemes, const EvalPlan& plan) {
  WindowList windows(random_windows(6, 24, parent.config().vocab_size), "test");
  EvalOptions options;
  options.batch_size = 2;
  options.progress = false;
  options.plan = plan;
  return evaluate(parent, schemes, windows, options);
}

EvalPlan streamed_plan() {
  EvalPlan p;
  p.name = "streamed";
  p.keep_full_blocks = p.keep_scheme_blocks = false;
  p.chunk_windows = 2;
  return p;
}

const json& error_of(const json& description, const std::string& tensor, const std::string& basis) {
  for (const json& e : description.at("artifact").at("weight_errors"))
    if (e.at("tensor") == tensor && e.at("basis") == basis) return e;
  static const json none;
  ADD_FAILURE() << "no " << basis << " error of " << tensor << " in " << description.dump();
  return none;
}

// Every tensor rounded to bfloat16 and back: a different embedding, norms, linears and head.
std::map<std::string, at::Tensor> rounded_to_bf16(std::map<std::string, at::Tensor> tensors) {
  for (auto& [name, t] : tensors) t = t.to(at::kBFloat16).to(at::kFloat);
  return tensors;
}

TEST(ArtifactScheme, ACopyOfTheParentIsFullPrecisionExactly) {
  test::TempDir dir;
  const fs::path copy = write_artifact(dir, parent_tensors());
  for (const EvalPlan& plan : {EvalPlan{}, streamed_plan()}) {
    SCOPED_TRACE(plan.name);
    std::unique_ptr<ModelReader> parent = open_checkpoint(parent_dir());
    PreparedSchemes prepared = make_schemes(parent->config(), {"full"});
    ArtifactScheme artifact = artifact_scheme(copy, *parent);
    prepared.schemes.push_back(artifact.scheme);
    const EvalResult result = run(*parent, prepared.schemes, plan);
    for (const auto& [w, full] : result.schemes[0].rows) {
      const WindowScores& a = result.schemes[1].rows.at(w);
      EXPECT_EQ(a.nll_sum, full.nll_sum) << "window " << w;
      EXPECT_EQ(a.kl_sum, 0.0) << "window " << w;
      EXPECT_EQ(a.top1_agree, a.tokens) << "window " << w;
    }
    nlohmann::json description = artifact.scheme.description;
    finish_artifact_description(artifact, *parent, description);
    for (const json& e : description["artifact"]["weight_errors"]) {
      EXPECT_EQ(e["relative_frobenius"].get<double>(), 0.0) << e.dump();
      EXPECT_EQ(e["basis"], "stored") << "the norms are the parent's: no folded basis";
    }
    // 2 layers × (2 norms + 7 linears) + embedding + head.
    EXPECT_EQ(description["artifact"]["weight_errors"].size(), 2u * 9 + 2);
    EXPECT_EQ(artifact.scheme.name, dir.path().filename().string() + ":float");
  }
}

TEST(ArtifactScheme, TheRowIsTheArtifactEvaluatedAloneBitForBit) {
  test::TempDir dir;
  const std::map<std::string, at::Tensor> rounded = rounded_to_bf16(parent_tensors());
  const fs::path path = write_artifact(dir, rounded);
  std::unique_ptr<ModelReader> alone_reader = open_checkpoint(path);
  std::vector<EvalScheme> alone = make_schemes(alone_reader->config(), {"full"}).schemes;
  const EvalResult expected = run(*alone_reader, alone, EvalPlan{});
  for (const EvalPlan& plan : {EvalPlan{}, streamed_plan()}) {
    SCOPED_TRACE(plan.name);
    std::unique_ptr<ModelReader> parent = open_checkpoint(parent_dir());
    PreparedSchemes prepared = make_schemes(parent->config(), {"full", "int8-vectorwise"});
    ArtifactScheme artifact = artifact_scheme(path, *parent);
    prepared.schemes.push_back(artifact.scheme);
    const EvalResult result = run(*parent, prepared.schemes, plan);
    bool any_difference = false;
    for (const auto& [w, alone_row] : expected.schemes[0].rows) {
      const WindowScores& a = result.schemes[2].rows.at(w);
      EXPECT_EQ(a.nll_sum, alone_row.nll_sum) << "window " << w;
      any_difference = any_difference || a.kl_sum > 0;
    }
    EXPECT_TRUE(any_difference) << "bf16 rounding must move the distribution";
    nlohmann::json description = artifact.scheme.description;
    finish_artifact_description(artifact, *parent, description);
    // Each error is the tensor's own, computed here in float64.
    const std::map<std::string, at::Tensor> original = parent_tensors();
    for (const auto& [canonical, hf] : std::map<std::string, std::string>{
             {"layers.1.mlp.down.weight", "model.layers.1.mlp.down_proj.weight"},
             {"layers.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
             {"token_embedding.weight", "model.embed_tokens.weight"},
             {"lm_head.weight", "lm_head.weight"}}) {
      const at::Tensor p = original.at(hf).to(at::kDouble), a = rounded.at(hf).to(at::kDouble);
      const double relative = ((a - p).norm() / p.norm()).item<double>();
      const double max_abs = (a - p).abs().max().item<double>();
      const json& e = error_of(description, canonical, "stored");
      EXPECT_NEAR(e.value("relative_frobenius", -1.0), relative, 1e-12 * relative) << canonical;
      EXPECT_EQ(e.value("max_abs_diff", -1.0), max_abs) << canonical;
      EXPECT_GT(relative, 1e-4) << canonical;
    }
    EXPECT_GT(description["artifact"]["weight_error"]["stored"]["tensors"].get<int>(), 0);
  }
}

TEST(ArtifactScheme, FoldedScalesMoveTheStoredTensorsNotWhatReachesTheOutput) {
  // AWQ's folds, applied exactly as AutoAWQ applies them (no quantisation): the norm's gains
  // times s and the next linears' columns divided by s; v's rows divided by t and o's columns
  // times t; up's rows divided by u and down's columns times u.
  std::map<std::string, at::Tensor> t = parent_tensors();
  at::manual_seed(5);
  for (int layer = 0; layer < 2; ++layer) {
    const std::string b = "model.layers." + std::to_string(layer) + ".";
    const at::Tensor s = at::rand({64}) * 3 + 0.25, s2 = at::rand({64}) * 3 + 0.25;
    const at::Tensor tv = at::rand({16}) * 3 + 0.25, u = at::rand({176}) * 3 + 0.25;
    t[b + "input_layernorm.weight"] = t[b + "input_layernorm.weight"] * s;
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"})
      t[b + m + ".weight"] = t[b + m + ".weight"] / s.reshape({1, -1});
    t[b + "self_attn.v_proj.weight"] = t[b + "self_attn.v_proj.weight"] / tv.reshape({-1, 1});
    // o's input columns: head h reads kv head h / 4 (8 heads, 2 kv heads, head_dim 8).
    const at::Tensor per_column = tv.reshape({2, 1, 8}).expand({2, 4, 8}).reshape({64});
    t[b + "self_attn.o_proj.weight"] = t[b + "self_attn.o_proj.weight"] * per_column.reshape({1, -1});
    t[b + "post_attention_layernorm.weight"] = t[b + "post_attention_layernorm.weight"] * s2;
    for (const char* m : {"mlp.gate_proj", "mlp.up_proj"}) t[b + m + ".weight"] = t[b + m + ".weight"] / s2.reshape({1, -1});
    t[b + "mlp.up_proj.weight"] = t[b + "mlp.up_proj.weight"] / u.reshape({-1, 1});
    t[b + "mlp.down_proj.weight"] = t[b + "mlp.down_proj.weight"] * u.reshape({1, -1});
  }
  test::TempDir dir;
  const fs::path path = write_artifact(dir, t);
  std::unique_ptr<ModelReader> parent = open_checkpoint(parent_dir());
  PreparedSchemes prepared = make_schemes(parent->config(), {"full"});
  ArtifactScheme artifact = artifact_scheme(path, *parent);
  prepared.schemes.push_back(artifact.scheme);
  const EvalResult result = run(*parent, prepared.schemes, EvalPlan{});
  for (const auto& [w, full] : result.schemes[0].rows)  // the same function, to float rounding
    EXPECT_NEAR(result.schemes[1].rows.at(w).nll_sum, full.nll_sum, 1e-4 * std::abs(full.nll_sum)) << "window " << w;
  nlohmann::json description = artifact.scheme.description;
  finish_artifact_description(artifact, *parent, description);
  for (int layer = 0; layer < 2; ++layer) {
    const std::string b = "layers." + std::to_string(layer) + ".";
    for (const char* linear : {"attn.q", "attn.k", "attn.v", "attn.o", "mlp.gate", "mlp.up", "mlp.down"})
      EXPECT_GT(error_of(description, b + linear + ".weight", "stored").value("relative_frobenius", 0.0), 0.1) << linear;
    for (const char* linear : {"attn.q", "attn.k", "mlp.gate"})
      EXPECT_LT(error_of(description, b + linear + ".weight", "norm-folded").value("relative_frobenius", 1.0), 1e-6) << linear;
    EXPECT_LT(error_of(description, b + "attn.v·o", "product").value("relative_frobenius", 1.0), 1e-6);
    EXPECT_LT(error_of(description, b + "mlp.up·down", "product").value("relative_frobenius", 1.0), 1e-6);
  }
  // A product's error is a real error: the bf16-rounded folds move it by about bf16's precision.
  for (auto& [name, tensor] : t) tensor = tensor.to(at::kBFloat16).to(at::kFloat);
  test::TempDir rounded_dir;
  ArtifactScheme rounded = artifact_scheme(write_artifact(rounded_dir, t), *parent);
  prepared = make_schemes(parent->config(), {"full"});
  prepared.schemes.push_back(rounded.scheme);
  run(*parent, prepared.schemes, EvalPlan{});
  description = rounded.scheme.description;
  finish_artifact_description(rounded, *parent, description);
  const double product = error_of(description, "layers.0.mlp.up·down", "product").value("relative_frobenius", 0.0);
  EXPECT_GT(product, 1e-4);
  EXPECT_LT(product, 2e-2);
}

std::string refusal(const std::function<void(std::map<std::string, at::Tensor>&, json&)>& edit) {
  std::map<std::string, at::Tensor> t = parent_tensors();
  json config = json::parse(read_file(parent_dir() / "config.json"));
  edit(t, config);
  test::TempDir dir;
  write_artifact(dir, t, [&config](json& c) { c = config; });
  std::unique_ptr<ModelReader> parent = open_checkpoint(parent_dir());
  try {
    artifact_scheme(dir.path(), *parent);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ArtifactScheme, AnArtifactOfAnotherShapeOrConfigIsRefusedNamingTheDifference) {
  const std::string fewer_layers = refusal([](auto& t, json& c) {
    c["num_hidden_layers"] = 1;
    for (auto it = t.begin(); it != t.end();) it = it->first.rfind("model.layers.1.", 0) == 0 ? t.erase(it) : std::next(it);
  });
  EXPECT_NE(fewer_layers.find("layers.1"), std::string::npos) << fewer_layers;
  EXPECT_NE(fewer_layers.find("absent in the artifact"), std::string::npos) << fewer_layers;
  const std::string wider = refusal([](auto& t, json& c) {
    c["intermediate_size"] = 192;
    for (int l = 0; l < 2; ++l) {
      const std::string b = "model.layers." + std::to_string(l) + ".mlp.";
      t[b + "gate_proj.weight"] = at::zeros({192, 64});
      t[b + "up_proj.weight"] = at::zeros({192, 64});
      t[b + "down_proj.weight"] = at::zeros({64, 192});
    }
  });
  EXPECT_NE(wider.find("layers.0.mlp.gate.weight is [192, 64] in the artifact and [176, 64] in the parent"), std::string::npos)
      << wider;
  const std::string rope = refusal([](auto&, json& c) { c["rope_theta"] = 500000.0; });
  EXPECT_NE(rope.find("rope_theta"), std::string::npos) << rope;
  EXPECT_NE(rope.find("config differs"), std::string::npos) << rope;
}

// --- declared input activations ------------------------------------------------------------

json ct_quantization(json input_activations, json targets = {"Linear"}) {
  return {{"method", "compressed-tensors"},
          {"config_groups",
           {{"group_0", {{"targets", targets}, {"weights", json::object()}, {"input_activations", input_activations}}}}}};
}

std::string declared_refusal(const json& quantization) {
  std::string account;
  try {
    declared_input_activations(quantization, "ART", &account);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ArtifactScheme, DeclaredActivationsMapOntoQevalsQuantisersOrAreRefusedWithTheWayOut) {
  std::string account;
  // llm-compressor's W8A8 and FP8_DYNAMIC, as they write them (null fields are the defaults).
  const json int8_token = {{"dynamic", true}, {"group_size", nullptr}, {"num_bits", 8}, {"strategy", "token"},
                           {"symmetric", true}, {"type", "int"}};
  std::optional<QuantSpec> spec = declared_input_activations(ct_quantization(int8_token), "ART", &account);
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->kind, QuantKind::int8_absmax);
  EXPECT_EQ(spec->granularity, Granularity::token);
  EXPECT_NE(account.find("127.5"), std::string::npos) << "the rounding difference is said: " << account;
  json fp8_tensor = int8_token;
  fp8_tensor["type"] = "float";
  fp8_tensor["strategy"] = "tensor";
  spec = declared_input_activations(ct_quantization(fp8_tensor), "ART", &account);
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->kind, QuantKind::fp8);
  EXPECT_EQ(spec->granularity, Granularity::tensor);
  const json nvfp4 = {{"dynamic", "local"}, {"group_size", 16}, {"num_bits", 4}, {"strategy", "tensor_group"},
                      {"symmetric", true}, {"type", "float"}};
  spec = declared_input_activations(ct_quantization(nvfp4), "ART", &account);
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->kind, QuantKind::nvfp4);
  EXPECT_NE(account.find("input_global_scale"), std::string::npos) << account;
  // Weights only: nothing declared.
  EXPECT_FALSE(declared_input_activations(ct_quantization(nullptr), "ART", &account).has_value());
  EXPECT_FALSE(declared_input_activations({{"method", "gptq"}, {"bits", 4}}, "ART", &account).has_value());
  EXPECT_FALSE(declared_input_activations({{"method", "bitsandbytes"}, {"bits", 4}}, "ART", &account).has_value());
  // What qeval cannot compute is refused, naming the artifact and the flag that evaluates it anyway.
  json static_tensor = int8_token;
  static_tensor["dynamic"] = false;
  static_tensor["strategy"] = "tensor";
  json asymmetric = int8_token;
  asymmetric["symmetric"] = false;
  for (const json& refused : {ct_quantization(static_tensor), ct_quantization(asymmetric),
                              ct_quantization(int8_token, {"re:.*self_attn.*"}),
                              json{{"method", "fp8"}, {"activation_scheme", "dynamic"}},
                              json{{"method", "bitsandbytes"}, {"bits", 8}}}) {
    const std::string message = declared_refusal(refused);
    EXPECT_NE(message.find("ART"), std::string::npos) << message;
    EXPECT_NE(message.find("--artifact-weights-only"), std::string::npos) << message;
  }
}

TEST(ArtifactScheme, DeclaredActivationsRunThroughQevalsQuantiserOnTheArtifactsWeights) {
  // The W8A8 folder llm-compressor wrote (tests/loaders/fixtures/quantized_folders); its parent
  // here is its own dequantised weights saved in float (the config is the same model's).
  const fs::path w8a8 = test::repo_path("tests/loaders/fixtures/quantized_folders/ct_w8a8_int8");
  const LoadedCheckpoint loaded = load_checkpoint(w8a8);
  test::TempDir dir;
  save_qeval_checkpoint(dir / "parent", loaded.config, loaded.weights);
  write_file_atomic(dir / "a8.json", R"({"name": "a8", "input_activations": {"kind": "int8_absmax", "granularity": "token"}})");
  // Expected: the artifact alone as full precision, with qeval's int8 per-token activations.
  std::unique_ptr<ModelReader> alone_reader = open_checkpoint(w8a8);
  std::vector<EvalScheme> alone = make_schemes(alone_reader->config(), {"full", (dir / "a8.json").string()}).schemes;
  const EvalResult expected = run(*alone_reader, alone, EvalPlan{});
  std::unique_ptr<ModelReader> parent = open_checkpoint(dir / "parent");
  for (const bool weights_only : {false, true}) {
    SCOPED_TRACE(weights_only ? "weights only" : "declared activations");
    PreparedSchemes prepared = make_schemes(parent->config(), {"full"});
    ArtifactScheme artifact = artifact_scheme(w8a8, *parent, weights_only);
    prepared.schemes.push_back(artifact.scheme);
    const EvalResult result = run(*parent, prepared.schemes, EvalPlan{});
    for (const auto& [w, row] : result.schemes[1].rows) {
      EXPECT_EQ(row.nll_sum, expected.schemes[weights_only ? 0 : 1].rows.at(w).nll_sum) << "window " << w;
      if (weights_only) EXPECT_EQ(row.kl_sum, 0.0) << "the parent is the artifact's own weights";
    }
    const json& activations = artifact.scheme.description["artifact"]["activations"];
    EXPECT_EQ(activations["applied"], weights_only ? "none" : "declared") << activations.dump();
    // The table's execution column says it too.
    const std::string execution = artifact.scheme.description["execution"];
    EXPECT_NE(execution.find(weights_only ? "weights only" : "int8_absmax per token"), std::string::npos) << execution;
  }
}

}  // namespace
}  // namespace qeval
