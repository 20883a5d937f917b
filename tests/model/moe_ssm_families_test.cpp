// Mixture-of-experts and state-space families (issue 45), each from a tiny random checkpoint in its
// Hugging Face layout (tests/model/fixtures/tiny-<family>-hf), loaded through the normal loader
// and run against reference logits, every block's hidden state and the routing (which experts each
// token picks) from an independent numpy float64 forward (tests/oracle/hf_moe_ssm_forward.py):
// Mixtral (softmax → top-2 → renormalised), Qwen2-MoE (shared expert with its sigmoid gate, a
// dense mlp_only layer, no renormalisation), Qwen3-MoE (q/k norms, decoder_sparse_step 2, top-3
// renormalised), Mamba (selective scan), Mamba-2 (chunked SSD with 2 groups, chunk 5 over 12
// tokens), Jamba (attention and Mamba, experts and dense MLPs, in all four combinations).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/model_reader.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

class Recorder : public ForwardObserver {
 public:
  void on_block_output(std::int64_t layer, const at::Tensor& hidden) override {
    EXPECT_EQ(layer, static_cast<std::int64_t>(hidden_.size()));
    hidden_.push_back(hidden.detach().clone());
  }
  bool wants_router(std::int64_t) const override { return true; }
  void on_router(std::int64_t, const at::Tensor& probs, const at::Tensor& selected) override {
    EXPECT_TRUE(at::allclose(probs.sum(-1), at::ones_like(probs.sum(-1)), 1e-5, 1e-5));
    routing_.push_back(selected.clone());
  }
  at::Tensor hidden() const { return at::stack(hidden_, 1); }  // [B, layer, L, D]
  at::Tensor routing() const { return routing_.empty() ? at::Tensor() : at::stack(routing_, 1); }  // [B, moe layer, L, k]

 private:
  std::vector<at::Tensor> hidden_, routing_;
};

struct Family {
  const char* folder;
  const char* format;
};

class MoeSsmFamilies : public ::testing::TestWithParam<Family> {};

TEST_P(MoeSsmFamilies, MatchIndependentForwardLogitsHiddenStatesAndRouting) {
  const auto dir = test::repo_path(std::string("tests/model/fixtures/") + GetParam().folder);
  const auto reference = read_safetensors(dir / "reference.safetensors");
  LoadedCheckpoint ckpt = load_checkpoint(dir);
  EXPECT_EQ(ckpt.format, GetParam().format);
  Transformer model(ckpt.config, ckpt.weights, dir.string());
  Recorder rec;
  const at::Tensor logits = model.forward(reference.at("input_ids"), &rec);
  const at::Tensor hs = rec.hidden();
  std::cout << GetParam().folder << ": max |dlogit| " << (logits - reference.at("logits")).abs().max().item<double>()
            << ", max |dhidden| " << (hs - reference.at("hidden")).abs().max().item<double>();
  EXPECT_TRUE(test::tensors_close(logits, reference.at("logits"), 1e-4));
  EXPECT_TRUE(test::tensors_close(hs, reference.at("hidden"), 1e-4));
  if (reference.count("routing")) {
    const at::Tensor routing = rec.routing();
    ASSERT_TRUE(routing.defined());
    ASSERT_EQ(routing.sizes(), reference.at("routing").sizes());
    const double agree = routing.eq(reference.at("routing")).to(at::kDouble).mean().item<double>();
    std::cout << ", routing agreement " << agree * 100 << "% of " << routing.numel() << " choices";
    EXPECT_TRUE(routing.equal(reference.at("routing")));
  } else {
    EXPECT_FALSE(rec.routing().defined());
  }
  std::cout << "\n";
}

// Read by parts (the layer-major evaluator's reader) gives the loaded weights bit for bit.
TEST_P(MoeSsmFamilies, ReaderPartsEqualTheWholeLoad) {
  const auto dir = test::repo_path(std::string("tests/model/fixtures/") + GetParam().folder);
  LoadedCheckpoint whole = load_checkpoint(dir);
  auto reader = open_checkpoint(dir);
  for (std::int64_t i = 0; i < whole.config.n_layers; ++i) {
    const auto parts = named_tensors(reader->block(i), i);
    const auto loaded = named_tensors(whole.weights.blocks[static_cast<std::size_t>(i)], i);
    ASSERT_EQ(parts.size(), loaded.size());
    for (std::size_t t = 0; t < parts.size(); ++t) {
      EXPECT_EQ(parts[t].first, loaded[t].first);
      EXPECT_TRUE(parts[t].second.equal(loaded[t].second)) << parts[t].first;
    }
    EXPECT_GT(reader->part_sizes().blocks[static_cast<std::size_t>(i)], 0);
  }
}

INSTANTIATE_TEST_SUITE_P(HfLayouts, MoeSsmFamilies,
                         ::testing::Values(Family{"tiny-mixtral-hf", "hf-mixtral"},
                                           Family{"tiny-qwen2-moe-hf", "hf-qwen2-moe"},
                                           Family{"tiny-qwen3-moe-hf", "hf-qwen3-moe"},
                                           Family{"tiny-mamba-hf", "hf-mamba"}, Family{"tiny-mamba2-hf", "hf-mamba2"},
                                           Family{"tiny-jamba-hf", "hf-jamba"}),
                         [](const auto& info) {
                           std::string name = info.param.format + 3;
                           for (auto& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

TEST(MoeSsmFamilies, LayerPatternsAndCanonicalLinearNames) {
  LoadedCheckpoint jamba = load_checkpoint(test::repo_path("tests/model/fixtures/tiny-jamba-hf"));
  const ModelConfig& c = jamba.config;
  // attn_layer_period 2 offset 1; expert_layer_period 3 offset 0.
  EXPECT_EQ(c.mixer(0), MixerKind::mamba);
  EXPECT_EQ(c.mixer(1), MixerKind::attention);
  EXPECT_EQ(c.ffn(0), FfnKind::moe);
  EXPECT_EQ(c.ffn(1), FfnKind::dense);
  EXPECT_EQ(c.ffn(3), FfnKind::moe);
  const auto names = block_linear_names(c, 0);
  const std::vector<std::string> expected_start{"layers.0.mamba.in_proj", "layers.0.mamba.x_proj",
                                                "layers.0.mamba.dt_proj", "layers.0.mamba.out_proj",
                                                "layers.0.moe.experts.0.gate"};
  ASSERT_GE(names.size(), expected_start.size());
  for (std::size_t i = 0; i < expected_start.size(); ++i) EXPECT_EQ(names[i], expected_start[i]);
  EXPECT_EQ(names.back(), "layers.0.moe.experts.3.down");
  // The config round-trips through qeval's config.json form.
  const ModelConfig back = config_from_json(config_to_json(c), "roundtrip");
  EXPECT_EQ(config_to_json(back), config_to_json(c));
}

TEST(MoeSsmFamilies, RefusalsNameTheKeyAndValue) {
  const auto src = test::repo_path("tests/model/fixtures/tiny-mamba-hf");
  const auto tmp = std::filesystem::temp_directory_path() / "qeval_moe_ssm_refusal";
  std::filesystem::remove_all(tmp);
  std::filesystem::copy(src, tmp, std::filesystem::copy_options::recursive);
  nlohmann::json config;
  std::ifstream(tmp / "config.json") >> config;
  config["hidden_act"] = "gelu";
  std::ofstream(tmp / "config.json") << config.dump();
  try {
    load_checkpoint(tmp);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_act \"gelu\""), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(tmp);
}

// HF writes Mamba2Config's time_step_limit (0.0, inf) as [0.0, Infinity] (Python's json), which is not
// JSON: the config still loads, with no upper limit, and the model is the fixture's.
TEST(MoeSsmFamilies, Mamba2ConfigWithPythonInfinityLoads) {
  const auto src = test::repo_path("tests/model/fixtures/tiny-mamba2-hf");
  const auto tmp = std::filesystem::temp_directory_path() / "qeval_mamba2_infinity";
  std::filesystem::remove_all(tmp);
  std::filesystem::copy(src, tmp, std::filesystem::copy_options::recursive);
  std::string text;
  {
    std::ifstream in(tmp / "config.json");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  text.insert(text.find('{') + 1, "\n  \"time_step_limit\": [0.0, Infinity],");
  std::ofstream(tmp / "config.json") << text;
  const LoadedCheckpoint ckpt = load_checkpoint(tmp);
  EXPECT_EQ(ckpt.config.ssm_dt_min, 0.0);
  EXPECT_EQ(ckpt.config.ssm_dt_max, 0.0);  // no limit
  std::filesystem::remove_all(tmp);
}

}  // namespace
}  // namespace qeval
