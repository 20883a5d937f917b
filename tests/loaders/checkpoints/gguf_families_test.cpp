// GGUF "gemma3", "qwen3" and "qwen2": the tiny HF fixtures of tests/model/fixtures converted here
// as llama.cpp's convert_hf_to_gguf.py converts them (tensor names blk.N.*, Gemma's norm gains
// stored with the +1 added, q/k left unpermuted because these are NEOX-rope architectures, the
// sliding window and head size as metadata), loaded through the GGUF loader and run against the
// independent forward's reference (gemma3, qwen3), or against the HF folder of the same weights
// (qwen2: llama.cpp's qwen2 has no sliding window, so the HF model runs without its one).
#include <gtest/gtest.h>

#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/transformer.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) { return test::repo_path("tests/model/fixtures/" + name); }

// The HF tensors of `folder` renamed to llama.cpp's names; norms get `norm_shift` added.
std::string gguf_from_hf(const std::string& folder, const std::string& arch, const LoadedCheckpoint& hf, float norm_shift) {
  const auto t = read_safetensors(fixture(folder) / "model.safetensors");
  const ModelConfig& c = hf.config;
  test::GgufBuilder g;
  g.string("general.architecture", arch);
  const std::string p = arch + ".";
  g.u32(p + "context_length", 64);
  g.u32(p + "embedding_length", static_cast<std::uint32_t>(c.d_model));
  g.u32(p + "feed_forward_length", static_cast<std::uint32_t>(c.d_ff));
  g.u32(p + "block_count", static_cast<std::uint32_t>(c.n_layers));
  g.u32(p + "attention.head_count", static_cast<std::uint32_t>(c.n_heads));
  g.u32(p + "attention.head_count_kv", static_cast<std::uint32_t>(c.n_kv_heads));
  g.u32(p + "attention.key_length", static_cast<std::uint32_t>(c.head_dim()));
  g.u32(p + "attention.value_length", static_cast<std::uint32_t>(c.head_dim()));
  g.u32(p + "rope.dimension_count", static_cast<std::uint32_t>(c.head_dim()));
  g.f32(p + "attention.layer_norm_rms_epsilon", static_cast<float>(c.norm_eps));
  g.f32(p + "rope.freq_base", static_cast<float>(c.rope_theta));
  if (arch == "gemma3") g.u32(p + "attention.sliding_window", static_cast<std::uint32_t>(c.attention_window(0)));
  auto norm = [&](const std::string& name) { return t.at(name) + norm_shift; };
  g.tensor("token_embd.weight", t.at("model.embed_tokens.weight"), 0);
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", b = "blk." + std::to_string(i) + ".";
    g.tensor(b + "attn_norm.weight", norm(h + "input_layernorm.weight"), 0);
    for (auto [from, to] : {std::pair{"q_proj", "attn_q"}, std::pair{"k_proj", "attn_k"}, std::pair{"v_proj", "attn_v"},
                            std::pair{"o_proj", "attn_output"}}) {
      g.tensor(b + to + ".weight", t.at(h + "self_attn." + from + ".weight"), 0);
      if (t.count(h + "self_attn." + from + ".bias")) g.tensor(b + to + ".bias", t.at(h + "self_attn." + from + ".bias"), 0);
    }
    if (c.qk_norm) {
      g.tensor(b + "attn_q_norm.weight", norm(h + "self_attn.q_norm.weight"), 0);
      g.tensor(b + "attn_k_norm.weight", norm(h + "self_attn.k_norm.weight"), 0);
    }
    if (c.sandwich_norms) {
      g.tensor(b + "post_attention_norm.weight", norm(h + "post_attention_layernorm.weight"), 0);
      g.tensor(b + "ffn_norm.weight", norm(h + "pre_feedforward_layernorm.weight"), 0);
      g.tensor(b + "post_ffw_norm.weight", norm(h + "post_feedforward_layernorm.weight"), 0);
    } else {
      g.tensor(b + "ffn_norm.weight", norm(h + "post_attention_layernorm.weight"), 0);
    }
    g.tensor(b + "ffn_gate.weight", t.at(h + "mlp.gate_proj.weight"), 0);
    g.tensor(b + "ffn_up.weight", t.at(h + "mlp.up_proj.weight"), 0);
    g.tensor(b + "ffn_down.weight", t.at(h + "mlp.down_proj.weight"), 0);
  }
  g.tensor("output_norm.weight", norm("model.norm.weight"), 0);
  if (!c.tied_embeddings) g.tensor("output.weight", t.at("lm_head.weight"), 0);
  return g.build();
}

LoadedCheckpoint load_converted(const test::TempDir& tmp, const std::string& folder, const std::string& arch,
                                float norm_shift) {
  const LoadedCheckpoint hf = load_checkpoint(fixture(folder));
  test::write_bytes(tmp / (arch + ".gguf"), gguf_from_hf(folder, arch, hf, norm_shift));
  return load_checkpoint(tmp / (arch + ".gguf"));
}

TEST(GgufFamilies, Gemma3MatchesTheIndependentForward) {
  test::TempDir tmp;
  const LoadedCheckpoint g = load_converted(tmp, "tiny-gemma3-hf", "gemma3", 1.0f);
  EXPECT_EQ(g.config.rope_pairing, RopePairing::half);
  EXPECT_EQ(g.config.head_dim(), 12);
  EXPECT_EQ(g.config.attention_windows, (std::vector<std::int64_t>{4, 4, 4, 4, 4, 0, 4}));
  EXPECT_EQ(g.config.rope_theta_local, 10000.0);
  EXPECT_TRUE(g.config.qk_norm && g.config.sandwich_norms && g.config.tied_embeddings);
  const auto reference = read_safetensors(fixture("tiny-gemma3-hf") / "reference.safetensors");
  const at::Tensor logits = Transformer(g.config, g.weights).forward(reference.at("input_ids"));
  EXPECT_TRUE(test::tensors_close(logits, reference.at("logits"), 1e-4));
}

TEST(GgufFamilies, Qwen3MatchesTheIndependentForward) {
  test::TempDir tmp;
  const LoadedCheckpoint g = load_converted(tmp, "tiny-qwen3-hf", "qwen3", 0.0f);
  EXPECT_EQ(g.config.head_dim(), 8);
  EXPECT_TRUE(g.config.qk_norm);
  const auto reference = read_safetensors(fixture("tiny-qwen3-hf") / "reference.safetensors");
  const at::Tensor logits = Transformer(g.config, g.weights).forward(reference.at("input_ids"));
  EXPECT_TRUE(test::tensors_close(logits, reference.at("logits"), 1e-4));
}

TEST(GgufFamilies, Qwen2MatchesTheHfFolderWithoutItsWindow) {
  test::TempDir tmp;
  const LoadedCheckpoint g = load_converted(tmp, "tiny-qwen2-hf", "qwen2", 0.0f);
  EXPECT_TRUE(g.config.qkv_bias && !g.config.attention_bias);
  LoadedCheckpoint hf = load_checkpoint(fixture("tiny-qwen2-hf"));
  hf.config.attention_windows.clear();
  const auto ids = read_safetensors(fixture("tiny-qwen2-hf") / "reference.safetensors").at("input_ids");
  EXPECT_TRUE(test::tensors_close(Transformer(g.config, g.weights).forward(ids),
                                  Transformer(hf.config, hf.weights).forward(ids), 1e-5));
}

}  // namespace
}  // namespace qeval
