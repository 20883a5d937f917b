// Hugging Face folders (GPT2LMHeadModel, LlamaForCausalLM; single file and sharded), the
// format detection of load_checkpoint, and broken folders that must each raise qeval::Error
// naming the file and the problem. Variants are written into a TempDir from the fixtures.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/model_reader.h"
#include "loaders/checkpoints/safetensors.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path gpt2_dir() { return test::data_path("fixtures/tiny-gpt2-hf"); }
fs::path llama_dir() { return test::data_path("fixtures/tiny-llama-hf"); }

json read_json(const fs::path& p) { return json::parse(read_file(p)); }

// A copy of the GPT-2 fixture with its tensors edited by `edit` and its config by `edit_config`.
fs::path gpt2_variant(const test::TempDir& tmp, const std::function<void(std::map<std::string, at::Tensor>&)>& edit,
                      const std::function<void(json&)>& edit_config = {}) {
  auto tensors = read_safetensors(gpt2_dir() / "model.safetensors");
  edit(tensors);
  json config = read_json(gpt2_dir() / "config.json");
  if (edit_config) edit_config(config);
  write_safetensors(tmp / "model.safetensors", tensors, {{"format", "pt"}});
  write_file_atomic(tmp / "config.json", config.dump());
  return tmp.path();
}

TEST(HfCheckpoint, Gpt2ConfigAndConv1DWeightsAreMapped) {
  LoadedCheckpoint ckpt = load_checkpoint(gpt2_dir());
  const ModelConfig& c = ckpt.config;
  EXPECT_EQ(ckpt.format, "hf-gpt2");
  EXPECT_EQ(c.architecture, "gpt2");
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.d_ff, 256);  // n_inner null → 4 * n_embd
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.max_seq_len, 64);
  EXPECT_EQ(c.norm, NormKind::layernorm);
  EXPECT_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.position, PositionKind::learned);
  EXPECT_EQ(c.mlp, MlpKind::gelu);
  EXPECT_TRUE(c.attention_bias && c.mlp_bias && c.tied_embeddings && c.fused_qkv);
  EXPECT_EQ(c.bos_id, 0);
  EXPECT_EQ(c.eos_id, 0);
  // Conv1D stores [in, out]; the internal layout is [out, in]; c_attn stays fused.
  auto raw = read_safetensors(gpt2_dir() / "model.safetensors");
  const auto& b1 = ckpt.weights.blocks.at(1);
  EXPECT_TRUE(test::tensors_equal(b1.qkv.weight, raw.at("transformer.h.1.attn.c_attn.weight").t()));
  EXPECT_EQ(b1.qkv.weight.sizes(), (std::vector<std::int64_t>{192, 64}));
  EXPECT_TRUE(test::tensors_equal(b1.qkv.bias, raw.at("transformer.h.1.attn.c_attn.bias")));
  EXPECT_TRUE(test::tensors_equal(b1.o.weight, raw.at("transformer.h.1.attn.c_proj.weight").t()));
  EXPECT_TRUE(test::tensors_equal(b1.up.weight, raw.at("transformer.h.1.mlp.c_fc.weight").t()));
  EXPECT_TRUE(test::tensors_equal(b1.down.weight, raw.at("transformer.h.1.mlp.c_proj.weight").t()));
  EXPECT_TRUE(b1.qkv.weight.is_contiguous());
  EXPECT_TRUE(ckpt.weights.lm_head.is_same(ckpt.weights.token_embedding));
  EXPECT_EQ(ckpt.weights_hash.size(), 16u);  // its definition: weights_hash_test.cpp
  EXPECT_EQ(open_checkpoint(gpt2_dir())->legacy_weights_hash(), hash_file(gpt2_dir() / "model.safetensors"));
  EXPECT_EQ(ckpt.notes.at("architecture"), "GPT2LMHeadModel");
}

TEST(HfCheckpoint, Gpt2WithoutTransformerPrefixAndWithMaskBuffersLoadsTheSameWeights) {
  test::TempDir tmp;
  fs::path dir = gpt2_variant(tmp, [](auto& tensors) {
    std::map<std::string, at::Tensor> renamed;
    for (auto& [name, t] : tensors) renamed[name.substr(std::string("transformer.").size())] = t;
    renamed["h.0.attn.bias"] = at::ones({1, 1, 64, 64}).tril();  // old checkpoints carry the causal mask
    tensors = renamed;
  });
  LoadedCheckpoint a = load_checkpoint(gpt2_dir()), b = load_checkpoint(dir);
  EXPECT_TRUE(test::tensors_equal(b.weights.blocks[0].qkv.weight, a.weights.blocks[0].qkv.weight));
  EXPECT_TRUE(test::tensors_equal(b.weights.position_embedding, a.weights.position_embedding));
  EXPECT_TRUE(test::tensors_equal(b.weights.final_norm.bias, a.weights.final_norm.bias));
  EXPECT_EQ(b.notes.at("ignored_tensors"), json::array({"h.0.attn.bias"}));
}

TEST(HfCheckpoint, LlamaShardedAndSingleFileGiveTheSameModel) {
  LoadedCheckpoint sharded = load_checkpoint(llama_dir());
  const ModelConfig& c = sharded.config;
  EXPECT_EQ(sharded.format, "hf-llama");
  EXPECT_EQ(c.d_model, 64);
  EXPECT_EQ(c.d_ff, 176);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.norm, NormKind::rmsnorm);
  EXPECT_EQ(c.position, PositionKind::rope);
  EXPECT_EQ(c.rope_pairing, RopePairing::half);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.mlp, MlpKind::swiglu);
  EXPECT_FALSE(c.tied_embeddings || c.attention_bias || c.mlp_bias || c.fused_qkv);
  EXPECT_EQ(c.bos_id, 1);
  EXPECT_EQ(c.eos_id, 2);
  EXPECT_FALSE(sharded.weights.lm_head.is_same(sharded.weights.token_embedding));
  EXPECT_EQ(sharded.notes.at("weight_files").size(), 2u);

  test::TempDir tmp;
  std::map<std::string, at::Tensor> all;
  for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
    for (auto& [name, t] : read_safetensors(llama_dir() / shard)) all[name] = t;
  write_safetensors(tmp / "model.safetensors", all);
  fs::copy_file(llama_dir() / "config.json", tmp / "config.json");
  LoadedCheckpoint single = load_checkpoint(tmp.path());
  EXPECT_TRUE(test::tensors_equal(single.weights.blocks[1].k.weight, sharded.weights.blocks[1].k.weight));
  EXPECT_TRUE(test::tensors_equal(single.weights.blocks[0].gate.weight, all.at("model.layers.0.mlp.gate_proj.weight")));
  EXPECT_TRUE(test::tensors_equal(single.weights.lm_head, all.at("lm_head.weight")));
  // The hash covers the tensors, not the files that hold them: one file or two shards, one hash.
  EXPECT_EQ(single.weights_hash, sharded.weights_hash);
  EXPECT_EQ(sharded.weights_hash, load_checkpoint(llama_dir()).weights_hash);
}

TEST(HfCheckpointBadInput, MissingTensor) {
  test::TempDir tmp;
  fs::path dir = gpt2_variant(tmp, [](auto& t) { t.erase("transformer.h.1.mlp.c_fc.bias"); });
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); },
                          {dir.string(), "missing tensor transformer.h.1.mlp.c_fc.bias", "[256]", "model.safetensors"}));
}

TEST(HfCheckpointBadInput, WrongShape) {
  test::TempDir tmp;
  fs::path dir = gpt2_variant(tmp, [](auto& t) {
    auto& w = t["transformer.h.0.attn.c_attn.weight"];
    w = w.t().contiguous();  // [192, 64]: someone transposed it already
  });
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); },
                          {"model.safetensors", "transformer.h.0.attn.c_attn.weight", "shape [192, 64], expected [64, 192]"}));
}

TEST(HfCheckpointBadInput, WrongDtype) {
  test::TempDir tmp;
  fs::path dir = gpt2_variant(tmp, [](auto& t) { t["transformer.ln_f.weight"] = at::ones({64}, at::kInt); });
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); }, {"model.safetensors", "transformer.ln_f.weight", "dtype I32"}));
}

TEST(HfCheckpointBadInput, UnexpectedTensor) {
  test::TempDir tmp;
  fs::path dir = gpt2_variant(tmp, [](auto& t) { t["transformer.h.2.ln_1.weight"] = at::ones({64}); });
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); }, {dir.string(), "unexpected tensor transformer.h.2.ln_1.weight"}));
}

TEST(HfCheckpointBadInput, UnknownArchitecture) {
  test::TempDir tmp;
  fs::path dir = gpt2_variant(tmp, [](auto&) {}, [](json& c) { c["architectures"] = {"BertForMaskedLM"}; });
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); },
                          {"config.json", "BertForMaskedLM", "GPT2LMHeadModel", "LlamaForCausalLM"}));
  fs::path dir2 = gpt2_variant(tmp, [](auto&) {}, [](json& c) {
    c.erase("architectures");
    c["model_type"] = "bert";
  });
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir2); }, {"config.json", "model_type \"bert\"", "gpt2", "llama"}));
}

TEST(HfCheckpointBadInput, MalformedOrIncompleteConfig) {
  test::TempDir tmp;
  fs::path dir = gpt2_variant(tmp, [](auto&) {});
  write_file_atomic(dir / "config.json", "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 64,");
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); }, {(dir / "config.json").string(), "malformed JSON"}));
  gpt2_variant(tmp, [](auto&) {}, [](json& c) { c.erase("n_embd"); });
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); }, {"config.json", "missing required \"n_embd\""}));
  gpt2_variant(tmp, [](auto&) {}, [](json& c) { c["n_head"] = "four"; });
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); }, {"config.json", "\"n_head\" is \"four\": expected an integer"}));
  gpt2_variant(tmp, [](auto&) {}, [](json& c) { c["n_head"] = 5; });  // 64 is not a multiple of 5
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); }, {"config.json", "\"n_embd\" 64 is not a multiple of \"n_head\" 5"}));
  gpt2_variant(tmp, [](auto&) {}, [](json& c) { c["activation_function"] = "relu"; });
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); }, {"config.json", "activation_function \"relu\""}));
}

// Copies the sharded Llama fixture, then lets `edit` break it.
fs::path llama_copy(const test::TempDir& tmp) {
  for (const auto& entry : fs::directory_iterator(llama_dir())) fs::copy_file(entry.path(), tmp / entry.path().filename().string());
  return tmp.path();
}

TEST(HfCheckpointBadInput, ShardIndexProblems) {
  {
    test::TempDir tmp;
    fs::path dir = llama_copy(tmp);
    fs::remove(dir / "model-00002-of-00002.safetensors");
    EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); },
                            {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "does not exist"}));
  }
  {
    test::TempDir tmp;
    fs::path dir = llama_copy(tmp);
    auto shard = read_safetensors(dir / "model-00002-of-00002.safetensors");
    shard["model.embed_tokens.weight"] = at::zeros({512, 64});  // also in shard 1
    write_safetensors(dir / "model-00002-of-00002.safetensors", shard);
    EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); },
                            {"model.embed_tokens.weight", "appears in both", "model-00001-of-00002.safetensors"}));
  }
  {
    test::TempDir tmp;
    fs::path dir = llama_copy(tmp);
    json index = read_json(dir / "model.safetensors.index.json");
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
    write_file_atomic(dir / "model.safetensors.index.json", index.dump());
    EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); },
                            {"model.safetensors.index.json", "model.norm.weight", "but it is in model-00002-of-00002"}));
    index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
    write_file_atomic(dir / "model.safetensors.index.json", index.dump());
    EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); }, {"model.safetensors.index.json", "same folder"}));
  }
  {
    test::TempDir tmp;
    fs::path dir = llama_copy(tmp);
    json index = read_json(dir / "model.safetensors.index.json");
    index["weight_map"].erase("lm_head.weight");
    write_file_atomic(dir / "model.safetensors.index.json", index.dump());
    EXPECT_TRUE(test::throws_with([&] { load_checkpoint(dir); }, {"lm_head.weight", "not listed in the index"}));
  }
}

TEST(LoadCheckpoint, RefusesWhatItCannotRead) {
  test::TempDir tmp;
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "nothing.bin"); }, {"nothing.bin", "does not exist", "GGUF"}));
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp.path()); }, {tmp.path().string(), "config.json"}));
  test::write_bytes(tmp / "model.onnx", "onnx");
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "model.onnx"); },
                          {"model.onnx", "unrecognised", "llama2.c", "GGUF", "config.json"}));
  test::write_bytes(tmp / "pytorch_model.bin", std::string("PK\x03\x04", 4) + std::string(100, '\0'));
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "pytorch_model.bin"); }, {"pytorch_model.bin", "zip", "torch.save"}));
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(gpt2_dir() / "model.safetensors"); }, {"model.safetensors", "config.json"}));
  write_file_atomic(tmp / "config.json", R"({"format": "onnx"})");
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp.path()); }, {"config.json", "\"onnx\"", "qeval"}));
  write_file_atomic(tmp / "config.json", R"({"hidden_size": 64})");
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp.path()); }, {"config.json", "architectures"}));
  // A config.json path means its folder.
  EXPECT_EQ(load_checkpoint(gpt2_dir() / "config.json").format, "hf-gpt2");
}

}  // namespace
}  // namespace qeval
