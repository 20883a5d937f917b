// Every family beyond GPT-2 and Llama, each from a tiny random checkpoint in its Hugging Face
// layout (tests/model/fixtures/tiny-<family>-hf: config.json as HF writes it + model.safetensors),
// loaded through the normal loader and run against reference logits and every block's hidden
// state from an independent numpy forward (tests/oracle/hf_families_forward.py, float64), within
// 1e-4 absolute. Each fixture exercises its family's switches: q/k/v biases and a sliding-window
// layer (Qwen2), q/k norms and a head size independent of the width (Qwen3), one window on every
// layer (Mistral), Gemma-3's scaled embeddings, (1 + w) gains, sandwich norms, GeGLU, local/global
// layers with two RoPE bases and query_pre_attn_scalar, Phi-3's fused qkv and gate_up with partial
// rotary and GQA, GPT-NeoX's parallel residual with per-head fused qkv and exact GELU, OPT's
// offset positions and ReLU.
#include <gtest/gtest.h>

#include <iostream>

#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/qeval_checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

class HiddenCollector : public ForwardObserver {
 public:
  void on_block_output(std::int64_t layer, const at::Tensor& hidden) override {
    EXPECT_EQ(layer, static_cast<std::int64_t>(hidden_.size()));
    hidden_.push_back(hidden.detach().clone());
  }
  at::Tensor stacked() const { return at::stack(hidden_, 1); }  // [B, layer, L, D]

 private:
  std::vector<at::Tensor> hidden_;
};

struct Family {
  const char* folder;
  const char* format;
};

class Families : public ::testing::TestWithParam<Family> {};

TEST_P(Families, MatchIndependentForwardLogitsAndHiddenStates) {
  const auto dir = test::repo_path(std::string("tests/model/fixtures/") + GetParam().folder);
  const auto reference = read_safetensors(dir / "reference.safetensors");
  LoadedCheckpoint ckpt = load_checkpoint(dir);
  EXPECT_EQ(ckpt.format, GetParam().format);
  Transformer model(ckpt.config, ckpt.weights, dir.string());
  HiddenCollector hidden;
  const at::Tensor logits = model.forward(reference.at("input_ids"), &hidden);
  const at::Tensor hs = hidden.stacked();
  // The measured gaps, for the record (the issue asks for them per family).
  std::cout << GetParam().folder << ": max |dlogit| "
            << (logits - reference.at("logits")).abs().max().item<double>() << ", max |dhidden| "
            << (hs - reference.at("hidden")).abs().max().item<double>() << "\n";
  EXPECT_TRUE(test::tensors_close(logits, reference.at("logits"), 1e-4));
  EXPECT_TRUE(test::tensors_close(hs, reference.at("hidden"), 1e-4));
}

INSTANTIATE_TEST_SUITE_P(HfLayouts, Families,
                         ::testing::Values(Family{"tiny-qwen2-hf", "hf-qwen2"}, Family{"tiny-qwen3-hf", "hf-qwen3"},
                                           Family{"tiny-mistral-hf", "hf-mistral"},
                                           Family{"tiny-gemma3-hf", "hf-gemma3"}, Family{"tiny-phi3-hf", "hf-phi3"},
                                           Family{"tiny-gpt-neox-hf", "hf-gpt-neox"},
                                           Family{"tiny-opt-hf", "hf-opt"}),
                         [](const auto& info) {
                           std::string name = info.param.format + 3;  // without "hf-"
                           for (auto& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// Each switch matters: turning it off moves the outputs far past the tolerance, so the fixtures
// above check the switch and not only what the families share.
TEST(FamilySwitches, EachOneChangesTheOutputs) {
  struct Case {
    const char* folder;
    const char* what;
    void (*flip)(ModelConfig&);
    double at_least = 1e-2;  // the smallest max |Δlogit| that shows the switch (the tolerance is 1e-4)
  };
  const Case cases[] = {
      {"tiny-gemma3-hf", "sandwich_norms", [](ModelConfig& c) { c.sandwich_norms = false; }},
      {"tiny-gemma3-hf", "embedding_scale", [](ModelConfig& c) { c.embedding_scale = 1.0; }},
      {"tiny-gemma3-hf", "attention_windows", [](ModelConfig& c) { c.attention_windows.clear(); }},
      {"tiny-gemma3-hf", "rope_theta_local", [](ModelConfig& c) { c.rope_theta_local = 0; }},
      {"tiny-gemma3-hf", "attention_scale (0.5 instead)", [](ModelConfig& c) { c.attention_scale = 0.5; }},
      {"tiny-gemma3-hf", "mlp geglu", [](ModelConfig& c) { c.mlp = MlpKind::swiglu; }},
      {"tiny-qwen3-hf", "qk_norm", [](ModelConfig& c) { c.qk_norm = false; }},
      {"tiny-mistral-hf", "attention_windows", [](ModelConfig& c) { c.attention_windows.clear(); }},
      {"tiny-gpt-neox-hf", "parallel_residual", [](ModelConfig& c) { c.parallel_residual = false; }},
      {"tiny-gpt-neox-hf", "rotary_dim", [](ModelConfig& c) { c.rotary_dim = 0; }},
      // erf and tanh GELU differ by < 2e-4 per activation: 1e-3 at these logits, still 10x the tolerance.
      {"tiny-gpt-neox-hf", "mlp gelu_erf", [](ModelConfig& c) { c.mlp = MlpKind::gelu; }, 5e-4},
      {"tiny-phi3-hf", "rotary_dim", [](ModelConfig& c) { c.rotary_dim = 0; }},
      {"tiny-opt-hf", "mlp relu", [](ModelConfig& c) { c.mlp = MlpKind::gelu; }},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(std::string(k.folder) + " without " + k.what);
    const auto dir = test::repo_path(std::string("tests/model/fixtures/") + k.folder);
    const auto reference = read_safetensors(dir / "reference.safetensors");
    LoadedCheckpoint ckpt = load_checkpoint(dir);
    ModelConfig changed = ckpt.config;
    k.flip(changed);
    ModelWeights weights = ckpt.weights;
    if (!changed.sandwich_norms)
      for (auto& b : weights.blocks) b.post_attn_norm = {}, b.post_mlp_norm = {};
    if (!changed.qk_norm)
      for (auto& b : weights.blocks) b.q_norm = {}, b.k_norm = {};
    const at::Tensor logits = Transformer(changed, weights).forward(reference.at("input_ids"));
    EXPECT_GT((logits - reference.at("logits")).abs().max().item<double>(), k.at_least);
  }
}

}  // namespace
}  // namespace qeval

namespace qeval {
namespace {

// qeval's own config.json form carries every new switch (and only when on), and a qeval
// checkpoint of each family reloads to the same model.
TEST(FamilySwitches, QevalCheckpointRoundTripsEveryFamily) {
  for (const char* folder : {"tiny-qwen2-hf", "tiny-qwen3-hf", "tiny-mistral-hf", "tiny-gemma3-hf", "tiny-phi3-hf",
                             "tiny-gpt-neox-hf", "tiny-opt-hf"}) {
    SCOPED_TRACE(folder);
    const auto dir = test::repo_path(std::string("tests/model/fixtures/") + folder);
    LoadedCheckpoint hf = load_checkpoint(dir);
    const nlohmann::json j = config_to_json(hf.config);
    const ModelConfig back = config_from_json(j, "round trip");
    EXPECT_EQ(config_to_json(back), j);
    test::TempDir tmp;
    save_qeval_checkpoint(tmp / "q", hf.config, hf.weights);
    LoadedCheckpoint q = load_checkpoint(tmp / "q");
    EXPECT_EQ(q.format, "qeval");
    const auto ids = read_safetensors(dir / "reference.safetensors").at("input_ids");
    EXPECT_TRUE(test::tensors_equal(Transformer(q.config, q.weights).forward(ids), Transformer(hf.config, hf.weights).forward(ids)));
  }
  // A config of before the switches has none of their keys.
  ModelConfig plain = load_checkpoint(test::data_path("fixtures/tiny-llama-hf")).config;
  for (const char* key : {"head_size", "attention_windows", "qk_norm", "sandwich_norms", "embedding_scale", "qkv_bias"})
    EXPECT_FALSE(config_to_json(plain).contains(key)) << key;
  const nlohmann::json gemma = config_to_json(load_checkpoint(test::repo_path("tests/model/fixtures/tiny-gemma3-hf")).config);
  EXPECT_EQ(gemma.at("head_size"), 12);
  EXPECT_EQ(gemma.at("attention_windows"), nlohmann::json({4, 4, 4, 4, 4, 0, 4}));
  EXPECT_EQ(gemma.at("rope_theta_local"), 10000.0);
  EXPECT_EQ(gemma.at("mlp"), "geglu");
  EXPECT_TRUE(gemma.at("qk_norm").get<bool>() && gemma.at("sandwich_norms").get<bool>());
}

TEST(FamilySwitches, ValidationNamesTheInconsistency) {
  ModelConfig c = load_checkpoint(test::repo_path("tests/model/fixtures/tiny-gemma3-hf")).config;
  auto refused = [](ModelConfig bad, std::initializer_list<std::string> parts) {
    return test::throws_with([&] { bad.validate("cfg"); }, parts);
  };
  ModelConfig bad = c;
  bad.attention_windows.pop_back();
  EXPECT_TRUE(refused(bad, {"cfg", "\"attention_windows\" has 6 entries", "7"}));
  bad = c, bad.attention_windows[2] = -1;
  EXPECT_TRUE(refused(bad, {"cfg", "\"attention_windows\" has the window -1"}));
  bad = c, bad.norm = NormKind::layernorm;
  EXPECT_TRUE(refused(bad, {"cfg", "qk_norm needs norm rmsnorm"}));
  bad = c, bad.rotary_dim = 13;
  EXPECT_TRUE(refused(bad, {"cfg", "\"rotary_dim\" gives 13 rotary channels"}));
  bad = c, bad.rotary_dim = 6, bad.head_size = 0;  // 16 / 2 = 8 per head now, so 6 rotate: fine
  EXPECT_NO_THROW(bad.validate("cfg"));
  bad = c, bad.rotary_dim = 5;
  EXPECT_TRUE(refused(bad, {"cfg", "\"rotary_dim\" gives 5 rotary channels", "even"}));
  bad = c, bad.mlp = MlpKind::relu, bad.fused_gate_up = true;
  EXPECT_TRUE(refused(bad, {"cfg", "fused_gate_up needs a gated MLP", "relu"}));
  bad = c, bad.parallel_residual = true;
  EXPECT_TRUE(refused(bad, {"cfg", "sandwich_norms and parallel_residual"}));
  bad = c, bad.embedding_scale = 0;
  EXPECT_TRUE(refused(bad, {"cfg", "\"embedding_scale\" is 0: expected a finite number > 0"}));
  bad = c, bad.final_logit_softcap = -1;
  EXPECT_TRUE(refused(bad, {"cfg", "final_logit_softcap"}));
}

// Gemma-2-style soft caps: c·tanh(x / c) on the logits (and on the attention scores).
TEST(FamilySwitches, FinalLogitSoftCapBoundsTheLogits) {
  const auto dir = test::repo_path("tests/model/fixtures/tiny-gemma3-hf");
  LoadedCheckpoint ckpt = load_checkpoint(dir);
  const auto ids = read_safetensors(dir / "reference.safetensors").at("input_ids");
  const at::Tensor plain = Transformer(ckpt.config, ckpt.weights).forward(ids);
  ModelConfig capped = ckpt.config;
  capped.final_logit_softcap = 5.0;
  EXPECT_TRUE(test::tensors_close(Transformer(capped, ckpt.weights).forward(ids), at::tanh(plain / 5.0) * 5.0, 1e-5));
  capped.attn_logit_softcap = 0.5;
  EXPECT_GT((Transformer(capped, ckpt.weights).forward(ids) - at::tanh(plain / 5.0) * 5.0).abs().max().item<double>(), 1e-3);
}

}  // namespace
}  // namespace qeval
