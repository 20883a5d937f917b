// The HF loaders of the families beyond GPT-2 and Llama (their forward is checked against the
// independent oracle in tests/model/families_test.cpp): what each config maps to, Gemma-3's
// multimodal folder giving the same language model, and configs qeval must refuse, each naming
// the file, the key and its value. Variants are written into a TempDir from the fixtures.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fixture(const std::string& name) { return test::repo_path("tests/model/fixtures/" + name); }

// A copy of `name` with its tensors renamed / edited by `edit` and its config by `edit_config`.
fs::path variant(const test::TempDir& tmp, const std::string& name, const std::function<void(json&)>& edit_config,
                 const std::function<void(std::map<std::string, at::Tensor>&)>& edit = {}) {
  auto tensors = read_safetensors(fixture(name) / "model.safetensors");
  if (edit) edit(tensors);
  json config = json::parse(read_file(fixture(name) / "config.json"));
  edit_config(config);
  write_safetensors(tmp / "model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(tmp / "config.json", config.dump());
  return tmp.path();
}

TEST(HfFamilies, ConfigsMapOntoTheSwitches) {
  const ModelConfig qwen2 = load_checkpoint(fixture("tiny-qwen2-hf")).config;
  EXPECT_TRUE(qwen2.qkv_bias && !qwen2.attention_bias);
  EXPECT_EQ(qwen2.attention_windows, (std::vector<std::int64_t>{0, 5}));
  const ModelConfig qwen3 = load_checkpoint(fixture("tiny-qwen3-hf")).config;
  EXPECT_TRUE(qwen3.qk_norm && qwen3.tied_embeddings);
  EXPECT_EQ(qwen3.head_dim(), 8);
  EXPECT_TRUE(qwen3.attention_windows.empty());
  const ModelConfig mistral = load_checkpoint(fixture("tiny-mistral-hf")).config;
  EXPECT_EQ(mistral.attention_windows, (std::vector<std::int64_t>{4, 4}));
  const LoadedCheckpoint gemma = load_checkpoint(fixture("tiny-gemma3-hf"));
  const ModelConfig& g = gemma.config;
  EXPECT_EQ(g.mlp, MlpKind::geglu);
  EXPECT_EQ(g.embedding_scale, 4.0);  // sqrt(16)
  EXPECT_EQ(g.attention_scale, 1.0 / std::sqrt(12.0));
  EXPECT_EQ(g.rope_theta, 1e6);
  EXPECT_EQ(g.rope_theta_local, 1e4);
  EXPECT_EQ(g.attention_windows, (std::vector<std::int64_t>{4, 4, 4, 4, 4, 0, 4}));
  EXPECT_TRUE(g.qk_norm && g.sandwich_norms && g.tied_embeddings);
  // (1 + w): the stored gains plus one.
  const auto raw = read_safetensors(fixture("tiny-gemma3-hf") / "model.safetensors");
  EXPECT_TRUE(test::tensors_equal(gemma.weights.blocks[2].post_mlp_norm.weight,
                                  raw.at("model.layers.2.post_feedforward_layernorm.weight") + 1));
  EXPECT_TRUE(test::tensors_equal(gemma.weights.blocks[0].k_norm.weight, raw.at("model.layers.0.self_attn.k_norm.weight") + 1));
  const ModelConfig phi3 = load_checkpoint(fixture("tiny-phi3-hf")).config;
  EXPECT_TRUE(phi3.fused_qkv && phi3.fused_gate_up);
  EXPECT_EQ(phi3.rotary_dim, 4);
  const ModelConfig neox = load_checkpoint(fixture("tiny-gpt-neox-hf")).config;
  EXPECT_TRUE(neox.parallel_residual && neox.fused_qkv && neox.attention_bias && neox.mlp_bias);
  EXPECT_EQ(neox.mlp, MlpKind::gelu_erf);
  EXPECT_EQ(neox.rotary_dim, 2);
  const LoadedCheckpoint opt = load_checkpoint(fixture("tiny-opt-hf"));
  EXPECT_EQ(opt.config.mlp, MlpKind::relu);
  EXPECT_EQ(opt.weights.position_embedding.size(0), 16);  // 18 stored, the offset rows dropped
}

// Gemma3ForConditionalGeneration: the text_config and the language model's tensors under
// model.language_model. (transformers ≥ 4.52) or language_model.model. (before), vision ignored.
TEST(HfFamilies, Gemma3MultimodalFolderGivesTheSameLanguageModel) {
  const LoadedCheckpoint text = load_checkpoint(fixture("tiny-gemma3-hf"));
  const auto ids = read_safetensors(fixture("tiny-gemma3-hf") / "reference.safetensors").at("input_ids");
  const at::Tensor expected = Transformer(text.config, text.weights).forward(ids);
  for (const std::string prefix : {"model.language_model.", "language_model.model."}) {
    SCOPED_TRACE(prefix);
    test::TempDir tmp;
    const fs::path dir = variant(
        tmp, "tiny-gemma3-hf",
        [](json& c) {
          json text_config = c;
          text_config.erase("architectures");
          c = json{{"architectures", {"Gemma3ForConditionalGeneration"}}, {"model_type", "gemma3"}, {"text_config", text_config}};
        },
        [&](std::map<std::string, at::Tensor>& t) {
          std::map<std::string, at::Tensor> renamed;
          for (auto& [name, tensor] : t) renamed[prefix + name.substr(std::string("model.").size())] = tensor;
          renamed["vision_tower.vision_model.post_layernorm.weight"] = at::ones({4});
          renamed["multi_modal_projector.mm_input_projection_weight"] = at::ones({4, 16});
          t = renamed;
        });
    const LoadedCheckpoint mm = load_checkpoint(dir);
    EXPECT_EQ(mm.format, "hf-gemma3");
    EXPECT_TRUE(test::tensors_equal(Transformer(mm.config, mm.weights).forward(ids), expected));
    EXPECT_EQ(mm.notes.at("ignored_tensors").size(), 2u);
  }
}

TEST(HfFamiliesBadInput, RefusedConfigsNameTheKey) {
  struct Case {
    const char* fixture;
    std::function<void(json&)> edit;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases{
      {"tiny-qwen2-hf", [](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; },
       {"config.json", "rope_scaling", "yarn"}},
      {"tiny-qwen3-hf", [](json& c) { c["hidden_act"] = "gelu"; }, {"config.json", "hidden_act \"gelu\""}},
      {"tiny-qwen2-hf", [](json& c) { c["layer_types"] = {"full_attention"}; }, {"config.json", "layer_types", "2"}},
      {"tiny-qwen2-hf", [](json& c) { c["layer_types"] = {"full_attention", "chunked_attention"}; },
       {"config.json", "chunked_attention"}},
      {"tiny-gemma3-hf", [](json& c) { c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}}; },
       {"config.json", "rope_scaling", "linear"}},
      {"tiny-gemma3-hf", [](json& c) { c["hidden_activation"] = "relu"; }, {"config.json", "hidden_activation \"relu\""}},
      {"tiny-opt-hf", [](json& c) { c["word_embed_proj_dim"] = 8; }, {"config.json", "word_embed_proj_dim", "project_in"}},
      {"tiny-opt-hf", [](json& c) { c["do_layer_norm_before"] = false; }, {"config.json", "do_layer_norm_before"}},
      {"tiny-gpt-neox-hf", [](json& c) { c["hidden_act"] = "relu"; }, {"config.json", "hidden_act \"relu\""}},
      {"tiny-phi3-hf", [](json& c) { c["rope_scaling"] = {{"type", "longrope"}}; }, {"config.json", "rope_scaling", "longrope"}},
  };
  for (const auto& k : cases) {
    test::TempDir tmp;
    const fs::path dir = variant(tmp, k.fixture, k.edit);
    try {
      load_checkpoint(dir);
      ADD_FAILURE() << k.fixture << ": loaded, expected a refusal naming " << k.message.back();
    } catch (const Error& e) {
      for (const auto& part : k.message)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "message \"" << e.what() << "\" lacks \"" << part << "\"";
    }
  }
}

TEST(HfFamiliesBadInput, MissingOrUnexpectedTensorsAreNamed) {
  test::TempDir a, b;
  const fs::path missing = variant(a, "tiny-gemma3-hf", [](json&) {},
                                   [](auto& t) { t.erase("model.layers.3.post_attention_layernorm.weight"); });
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(missing); }, {"model.layers.3.post_attention_layernorm.weight"}));
  const fs::path extra = variant(b, "tiny-phi3-hf", [](json&) {}, [](auto& t) { t["model.layers.0.mlp.gate_proj.weight"] = at::ones({40, 32}); });
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(extra); }, {"unexpected tensor model.layers.0.mlp.gate_proj.weight"}));
}

}  // namespace
}  // namespace qeval
