// qeval's own checkpoints: save_qeval_checkpoint + load_checkpoint round trips every switch
// exactly, the file holds the documented canonical names, a converted HF fixture still meets
// its reference logits, and mismatched folders are refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/qeval_checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Random weights for `c` (deterministic), built from the config alone.
ModelWeights random_weights(const ModelConfig& c, std::uint64_t seed) {
  at::manual_seed(seed);
  const std::int64_t D = c.d_model, F = c.d_ff, hd = c.head_dim();
  auto lin = [&](std::int64_t out, std::int64_t in, bool bias) {
    return LinearWeights{at::randn({out, in}) * 0.2, bias ? at::randn({out}) * 0.1 : at::Tensor()};
  };
  auto norm = [&] {
    const std::int64_t width = c.norm == NormKind::rmsnorm_single ? 1 : D;
    return NormWeights{1 + 0.1 * at::randn({width}), c.norm == NormKind::layernorm ? 0.1 * at::randn({D}) : at::Tensor()};
  };
  ModelWeights w;
  w.token_embedding = at::randn({c.vocab_size, D});
  if (c.position == PositionKind::learned) w.position_embedding = 0.1 * at::randn({c.max_seq_len, D});
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    BlockWeights b;
    b.attn_norm = norm();
    if (c.fused_qkv) {
      b.qkv = lin((c.n_heads + 2 * c.n_kv_heads) * hd, D, c.attention_bias);
    } else {
      b.q = lin(c.n_heads * hd, D, c.attention_bias);
      b.k = lin(c.n_kv_heads * hd, D, c.attention_bias);
      b.v = lin(c.n_kv_heads * hd, D, c.attention_bias);
    }
    b.o = lin(D, c.n_heads * hd, c.attention_bias);
    b.mlp_norm = norm();
    b.up = lin(F, D, c.mlp_bias);
    if (c.mlp == MlpKind::swiglu) b.gate = lin(F, D, c.mlp_bias);
    b.down = lin(D, F, c.mlp_bias);
    w.blocks.push_back(b);
  }
  w.final_norm = norm();
  w.lm_head = c.tied_embeddings ? w.token_embedding : at::randn({c.vocab_size, D});
  return w;
}

ModelConfig gpt2_like() {
  ModelConfig c;
  c.architecture = "gpt2";
  c.vocab_size = 50;
  c.d_model = 16;
  c.d_ff = 40;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.max_seq_len = 12;
  c.norm = NormKind::layernorm;
  c.position = PositionKind::learned;
  c.mlp = MlpKind::gelu;
  c.attention_bias = c.mlp_bias = c.tied_embeddings = c.fused_qkv = true;
  c.eos_id = 0;
  return c;
}

ModelConfig llama_like() {
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 40;
  c.d_model = 24;
  c.d_ff = 36;
  c.n_layers = 3;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.max_seq_len = 0;
  c.norm = NormKind::rmsnorm_single;
  c.norm_eps = 1e-6;
  c.position = PositionKind::rope;
  c.rope_pairing = RopePairing::half;
  c.rope_theta = 500000.0;
  c.attention_softmax = SoftmaxKind::softmax1;
  c.mlp = MlpKind::swiglu;
  c.mlp_bias = true;
  c.bos_id = 1;
  c.optimizer = "orthoadam";
  return c;
}

void expect_same_weights(const ModelConfig& c, const ModelWeights& got, const ModelWeights& expected) {
  auto a = qeval_named_tensors(c, got), b = qeval_named_tensors(c, expected);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : b) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(test::tensors_equal(a.at(name), t));
  }
}

TEST(QevalCheckpoint, RoundTripsEverySwitchExactly) {
  for (const ModelConfig& config : {gpt2_like(), llama_like()}) {
    SCOPED_TRACE(config.architecture);
    test::TempDir tmp;
    const ModelWeights weights = random_weights(config, 7);
    const json extra = {{"step", 1500}, {"tokens_seen", 12345678}, {"data", "tinystories"}};
    save_qeval_checkpoint(tmp / "ckpt", config, weights, extra);
    LoadedCheckpoint loaded = load_checkpoint(tmp / "ckpt");
    EXPECT_EQ(loaded.format, "qeval");
    EXPECT_EQ(config_to_json(loaded.config), config_to_json(config));
    EXPECT_EQ(loaded.notes.at("metadata"), extra);
    EXPECT_EQ(loaded.weights_hash.size(), 16u);
    expect_same_weights(config, loaded.weights, weights);
    EXPECT_EQ(loaded.weights.lm_head.is_same(loaded.weights.token_embedding), config.tied_embeddings);
    at::Tensor tokens = at::randint(config.vocab_size, {2, 10}, at::kLong);
    EXPECT_TRUE(test::tensors_equal(Transformer(loaded.config, loaded.weights).forward(tokens),
                                    Transformer(config, weights).forward(tokens)));
  }
}

TEST(QevalCheckpoint, FileHoldsTheDocumentedCanonicalNames) {
  ModelConfig c = gpt2_like();
  c.n_layers = 1;
  test::TempDir tmp;
  save_qeval_checkpoint(tmp.path(), c, random_weights(c, 3));
  std::set<std::string> names;
  for (const auto& [name, t] : read_safetensors(tmp / "model.safetensors")) names.insert(name);
  const std::set<std::string> gpt2_names{
      "token_embedding",         "position_embedding",      "layers.0.attn_norm.weight", "layers.0.attn_norm.bias",
      "layers.0.attn.qkv.weight", "layers.0.attn.qkv.bias", "layers.0.attn.o.weight",    "layers.0.attn.o.bias",
      "layers.0.mlp_norm.weight", "layers.0.mlp_norm.bias", "layers.0.mlp.up.weight",    "layers.0.mlp.up.bias",
      "layers.0.mlp.down.weight", "layers.0.mlp.down.bias", "final_norm.weight",         "final_norm.bias"};
  EXPECT_EQ(names, gpt2_names);  // tied: no lm_head.weight

  ModelConfig l = llama_like();
  l.n_layers = 1;
  l.mlp_bias = false;
  save_qeval_checkpoint(tmp / "llama", l, random_weights(l, 4));
  names.clear();
  for (const auto& [name, t] : read_safetensors(tmp / "llama" / "model.safetensors")) names.insert(name);
  const std::set<std::string> llama_names{"token_embedding",          "layers.0.attn_norm.weight", "layers.0.attn.q.weight",
                                          "layers.0.attn.k.weight",   "layers.0.attn.v.weight",    "layers.0.attn.o.weight",
                                          "layers.0.mlp_norm.weight", "layers.0.mlp.gate.weight",  "layers.0.mlp.up.weight",
                                          "layers.0.mlp.down.weight", "final_norm.weight",         "lm_head.weight"};
  EXPECT_EQ(names, llama_names);
  const json config = json::parse(read_file(tmp / "llama" / "config.json"));
  EXPECT_EQ(config.at("format"), "qeval");
  EXPECT_EQ(config.at("norm"), "rmsnorm_single");
}

// An HF model converted to a qeval checkpoint still meets the independent reference.
TEST(QevalCheckpoint, ConvertedFixtureStillMatchesItsReference) {
  const auto fixture = test::data_path("fixtures/tiny-gpt2-hf");
  LoadedCheckpoint hf = load_checkpoint(fixture);
  test::TempDir tmp;
  save_qeval_checkpoint(tmp.path(), hf.config, hf.weights, {{"converted_from", fixture.string()}});
  LoadedCheckpoint ours = load_checkpoint(tmp.path());
  const auto reference = read_safetensors(fixture / "reference.safetensors");
  at::Tensor logits = Transformer(ours.config, ours.weights).forward(reference.at("input_ids"));
  EXPECT_TRUE(test::tensors_close(logits, reference.at("logits_softmax"), 1e-4));
}

TEST(QevalCheckpoint, HalfPrecisionWeightsLoadAsFloat32) {
  ModelConfig c = llama_like();
  const ModelWeights w = random_weights(c, 5);
  test::TempDir tmp;
  save_qeval_checkpoint(tmp.path(), c, w);
  auto tensors = read_safetensors(tmp / "model.safetensors");
  for (auto& [name, t] : tensors) t = t.to(at::kBFloat16);
  write_safetensors(tmp / "model.safetensors", tensors);
  LoadedCheckpoint loaded = load_checkpoint(tmp.path());
  EXPECT_EQ(loaded.weights.blocks[2].k.weight.scalar_type(), at::kFloat);
  EXPECT_TRUE(test::tensors_equal(loaded.weights.blocks[2].k.weight, w.blocks[2].k.weight.to(at::kBFloat16).to(at::kFloat)));
}

TEST(QevalCheckpointBadInput, WeightsThatDoNotMatchTheConfig) {
  ModelConfig c = gpt2_like();
  test::TempDir tmp;
  save_qeval_checkpoint(tmp.path(), c, random_weights(c, 6));
  auto tensors = read_safetensors(tmp / "model.safetensors");

  auto extra = tensors;
  extra["lm_head.weight"] = at::zeros({50, 16});
  write_safetensors(tmp / "model.safetensors", extra);
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp.path()); }, {tmp.path().string(), "unexpected tensor lm_head.weight"}));

  auto missing = tensors;
  missing.erase("layers.1.mlp.down.weight");
  write_safetensors(tmp / "model.safetensors", missing);
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp.path()); },
                          {tmp.path().string(), "missing tensor layers.1.mlp.down.weight", "[16, 40]"}));

  auto wrong = tensors;
  wrong["layers.0.attn.qkv.weight"] = at::zeros({16, 48});
  write_safetensors(tmp / "model.safetensors", wrong);
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp.path()); },
                          {"model.safetensors", "layers.0.attn.qkv.weight", "shape [16, 48], expected [48, 16]"}));

  write_safetensors(tmp / "model.safetensors", tensors);
  json config = config_to_json(c);
  config["n_heads"] = 3;
  write_file_atomic(tmp / "config.json", config.dump());
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp.path()); }, {"config.json", "\"n_heads\" 3"}));
  config = config_to_json(c);
  config["norm"] = "batchnorm";
  write_file_atomic(tmp / "config.json", config.dump());
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp.path()); }, {"config.json", "batchnorm", "layernorm"}));
}

TEST(QevalCheckpointBadInput, SaveRefusesInconsistentWeights) {
  ModelConfig c = gpt2_like();
  ModelWeights w = random_weights(c, 8);
  w.blocks[1].up.weight = at::zeros({40, 15});
  test::TempDir tmp;
  EXPECT_TRUE(test::throws_with([&] { save_qeval_checkpoint(tmp / "bad", c, w); }, {"layers.1.mlp.up.weight", "[40, 15]"}));
  EXPECT_FALSE(fs::exists(tmp / "bad" / "config.json"));
}

}  // namespace
}  // namespace qeval
