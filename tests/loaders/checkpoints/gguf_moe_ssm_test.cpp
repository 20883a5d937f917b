// GGUF mixture-of-experts and state-space models (issue 45): the tiny HF fixtures of
// tests/model/fixtures converted here as llama.cpp's convert_hf_to_gguf.py converts them (experts
// merged into ffn_{gate,up,down}_exps [E, F, D], the router as ffn_gate_inp, Qwen2-MoE's shared
// expert as *_shexp with its gate a [D] vector; Mamba's ssm_* tensors with A = −exp(A_log), the conv
// squeezed to [C, K], Mamba-2's A and D as [H, 1] and its norm as [G, d_inner / G]; Mixtral as
// "llama" with q/k permuted to the interleaved rotary layout), loaded through the GGUF loader and
// run against the independent forward's reference — or, for Mamba-2 with 2 groups, against the HF
// folder with the gated norm per group, since llama.cpp (like mamba_ssm) normalises per group.
#include <gtest/gtest.h>

#include <array>
#include <map>

#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/transformer.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) { return test::repo_path("tests/model/fixtures/" + name); }

// llama.cpp's LlamaModel.permute: HF's rotate-half rows → interleaved pairs.
at::Tensor permute_rotary(const at::Tensor& w, std::int64_t heads) {
  return w.reshape({heads, 2, w.size(0) / heads / 2, w.size(1)}).transpose(1, 2).reshape(w.sizes()).contiguous();
}

struct Converter {
  std::map<std::string, at::Tensor> t;
  const ModelConfig& c;
  test::GgufBuilder g;
  std::string p;

  Converter(const std::string& folder, const std::string& arch, const ModelConfig& config)
      : t(read_safetensors(fixture(folder) / "model.safetensors")), c(config), p(arch + ".") {
    g.string("general.architecture", arch);
    g.u32(p + "context_length", 64);
    g.u32(p + "embedding_length", static_cast<std::uint32_t>(c.d_model));
    g.u32(p + "block_count", static_cast<std::uint32_t>(c.n_layers));
    g.f32(p + "attention.layer_norm_rms_epsilon", static_cast<float>(c.norm_eps));
  }
  void tensor(const std::string& name, const at::Tensor& v) { g.tensor(name, v.contiguous(), 0); }
  void attention_meta() {
    g.u32(p + "feed_forward_length", static_cast<std::uint32_t>(c.d_ff));
    g.u32(p + "attention.head_count", static_cast<std::uint32_t>(c.n_heads));
    g.u32(p + "attention.head_count_kv", static_cast<std::uint32_t>(c.n_kv_heads));
    if (c.position == PositionKind::rope) {
      g.u32(p + "attention.key_length", static_cast<std::uint32_t>(c.head_dim()));
      g.u32(p + "attention.value_length", static_cast<std::uint32_t>(c.head_dim()));
      g.u32(p + "rope.dimension_count", static_cast<std::uint32_t>(c.head_dim()));
      g.f32(p + "rope.freq_base", static_cast<float>(c.rope_theta));
    }
  }
  void moe_meta() {
    g.u32(p + "expert_count", static_cast<std::uint32_t>(c.moe_experts));
    g.u32(p + "expert_used_count", static_cast<std::uint32_t>(c.moe_top_k));
    if (c.moe_d_ff > 0) g.u32(p + "expert_feed_forward_length", static_cast<std::uint32_t>(c.moe_d_ff));
    if (c.moe_shared_d_ff > 0) g.u32(p + "expert_shared_feed_forward_length", static_cast<std::uint32_t>(c.moe_shared_d_ff));
  }
  void ssm_meta() {
    g.u32(p + "ssm.inner_size", static_cast<std::uint32_t>(c.ssm_d_inner));
    g.u32(p + "ssm.state_size", static_cast<std::uint32_t>(c.ssm_d_state));
    g.u32(p + "ssm.conv_kernel", static_cast<std::uint32_t>(c.ssm_d_conv));
    g.u32(p + "ssm.time_step_rank", static_cast<std::uint32_t>(c.ssm_heads > 0 ? c.ssm_heads : c.ssm_dt_rank));
    if (c.ssm_heads > 0) g.u32(p + "ssm.group_count", static_cast<std::uint32_t>(c.ssm_groups));
  }
  void attention(const std::string& h, const std::string& b, bool permute) {
    for (auto [from, to] : {std::pair{"q_proj", "attn_q"}, std::pair{"k_proj", "attn_k"}, std::pair{"v_proj", "attn_v"},
                            std::pair{"o_proj", "attn_output"}}) {
      at::Tensor w = t.at(h + "self_attn." + from + ".weight");
      if (permute && std::string(from) == "q_proj") w = permute_rotary(w, c.n_heads);
      if (permute && std::string(from) == "k_proj") w = permute_rotary(w, c.n_kv_heads);
      tensor(b + to + ".weight", w);
      if (t.count(h + "self_attn." + from + ".bias")) tensor(b + to + ".bias", t.at(h + "self_attn." + from + ".bias"));
    }
    if (c.qk_norm) {
      tensor(b + "attn_q_norm.weight", t.at(h + "self_attn.q_norm.weight"));
      tensor(b + "attn_k_norm.weight", t.at(h + "self_attn.k_norm.weight"));
    }
  }
  // HF experts under `m` (names gate/up/down as given) merged into llama.cpp's 3-D tensors.
  void experts(const std::string& m, const std::string& b, const char* router, std::array<const char*, 3> names) {
    tensor(b + "ffn_gate_inp.weight", t.at(m + router));
    std::vector<at::Tensor> gate, up, down;
    for (std::int64_t e = 0; e < c.moe_experts; ++e) {
      const std::string x = m + "experts." + std::to_string(e) + ".";
      gate.push_back(t.at(x + names[0] + ".weight"));
      up.push_back(t.at(x + names[1] + ".weight"));
      down.push_back(t.at(x + names[2] + ".weight"));
    }
    tensor(b + "ffn_gate_exps.weight", at::stack(gate));
    tensor(b + "ffn_up_exps.weight", at::stack(up));
    tensor(b + "ffn_down_exps.weight", at::stack(down));
    if (c.moe_shared_d_ff > 0) {
      tensor(b + "ffn_gate_shexp.weight", t.at(m + "shared_expert.gate_proj.weight"));
      tensor(b + "ffn_up_shexp.weight", t.at(m + "shared_expert.up_proj.weight"));
      tensor(b + "ffn_down_shexp.weight", t.at(m + "shared_expert.down_proj.weight"));
      tensor(b + "ffn_gate_inp_shexp.weight", t.at(m + "shared_expert_gate.weight").reshape({-1}));
    }
  }
  void dense(const std::string& m, const std::string& b) {
    tensor(b + "ffn_gate.weight", t.at(m + "gate_proj.weight"));
    tensor(b + "ffn_up.weight", t.at(m + "up_proj.weight"));
    tensor(b + "ffn_down.weight", t.at(m + "down_proj.weight"));
  }
  void ssm(const std::string& m, const std::string& b, bool mamba2) {
    tensor(b + "ssm_in.weight", t.at(m + "in_proj.weight"));
    const at::Tensor conv = t.at(m + "conv1d.weight");
    tensor(b + "ssm_conv1d.weight", conv.reshape({conv.size(0), conv.size(2)}));
    tensor(b + "ssm_conv1d.bias", t.at(m + "conv1d.bias"));
    tensor(b + "ssm_out.weight", t.at(m + "out_proj.weight"));
    const at::Tensor A = t.at(m + "A_log").exp().neg();
    if (mamba2) {
      tensor(b + "ssm_dt.bias", t.at(m + "dt_bias"));
      tensor(b + "ssm_a", A.reshape({-1, 1}));
      tensor(b + "ssm_d", t.at(m + "D").reshape({-1, 1}));
      tensor(b + "ssm_norm.weight", t.at(m + "norm.weight").reshape({c.ssm_groups, -1}));
      return;
    }
    tensor(b + "ssm_x.weight", t.at(m + "x_proj.weight"));
    tensor(b + "ssm_dt.weight", t.at(m + "dt_proj.weight"));
    tensor(b + "ssm_dt.bias", t.at(m + "dt_proj.bias"));
    tensor(b + "ssm_a", A);
    tensor(b + "ssm_d", t.at(m + "D"));
    if (c.ssm_bcdt_norm) {
      tensor(b + "ssm_dt_norm.weight", t.at(m + "dt_layernorm.weight"));
      tensor(b + "ssm_b_norm.weight", t.at(m + "b_layernorm.weight"));
      tensor(b + "ssm_c_norm.weight", t.at(m + "c_layernorm.weight"));
    }
  }
};

std::string convert(const std::string& folder, const std::string& arch, const ModelConfig& c) {
  Converter k(folder, arch, c);
  const bool ssm_family = arch == "mamba" || arch == "mamba2";
  if (!ssm_family) k.attention_meta();
  if (c.has_ffn(FfnKind::moe)) k.moe_meta();
  if (c.has_mixer(MixerKind::mamba) || c.has_mixer(MixerKind::mamba2)) k.ssm_meta();
  const std::string root = ssm_family ? "backbone." : "model.";
  k.tensor("token_embd.weight", k.t.at(root + (ssm_family ? "embeddings.weight" : "embed_tokens.weight")));
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    const std::string h = root + "layers." + std::to_string(i) + ".", b = "blk." + std::to_string(i) + ".";
    if (ssm_family) {
      k.tensor(b + "attn_norm.weight", k.t.at(h + "norm.weight"));
      k.ssm(h + "mixer.", b, arch == "mamba2");
      continue;
    }
    k.tensor(b + "attn_norm.weight", k.t.at(h + "input_layernorm.weight"));
    if (c.mixer(i) == MixerKind::attention)
      k.attention(h, b, arch == "llama");
    else
      k.ssm(h + "mamba.", b, false);
    if (arch == "jamba") {
      k.tensor(b + "ffn_norm.weight", k.t.at(h + "pre_ff_layernorm.weight"));
      if (c.ffn(i) == FfnKind::moe)
        k.experts(h + "feed_forward.", b, "router.weight", {"gate_proj", "up_proj", "down_proj"});
      else
        k.dense(h + "feed_forward.", b);
      continue;
    }
    k.tensor(b + "ffn_norm.weight", k.t.at(h + "post_attention_layernorm.weight"));
    if (arch == "llama")
      k.experts(h + "block_sparse_moe.", b, "gate.weight", {"w1", "w3", "w2"});
    else if (c.ffn(i) == FfnKind::moe)
      k.experts(h + "mlp.", b, "gate.weight", {"gate_proj", "up_proj", "down_proj"});
    else
      k.dense(h + "mlp.", b);
  }
  k.tensor("output_norm.weight", k.t.at(ssm_family ? "backbone.norm_f.weight"
                                                   : (arch == "jamba" ? "model.final_layernorm.weight" : "model.norm.weight")));
  if (!c.tied_embeddings) k.tensor("output.weight", k.t.at("lm_head.weight"));
  return k.g.build();
}

struct Case {
  const char* folder;
  const char* arch;
};

class GgufMoeSsm : public ::testing::TestWithParam<Case> {};

TEST_P(GgufMoeSsm, MatchesTheIndependentForward) {
  const LoadedCheckpoint hf = load_checkpoint(fixture(GetParam().folder));
  test::TempDir tmp;
  const fs::path file = tmp / (std::string(GetParam().arch) + ".gguf");
  test::write_bytes(file, convert(GetParam().folder, GetParam().arch, hf.config));
  const LoadedCheckpoint g = load_checkpoint(file);
  EXPECT_EQ(g.config.layer_mixers, hf.config.layer_mixers);
  EXPECT_EQ(g.config.layer_ffns, hf.config.layer_ffns);
  EXPECT_EQ(g.config.moe_router_norm, hf.config.moe_router_norm);
  const auto reference = read_safetensors(fixture(GetParam().folder) / "reference.safetensors");
  const at::Tensor logits = Transformer(g.config, g.weights).forward(reference.at("input_ids"));
  if (g.config.has_mixer(MixerKind::mamba2)) {
    // llama.cpp's gated norm is per group; the same weights in qeval's HF reading with that norm.
    EXPECT_EQ(g.config.ssm_norm_groups, hf.config.ssm_groups);
    ModelConfig grouped = hf.config;
    grouped.ssm_norm_groups = grouped.ssm_groups;
    const at::Tensor expected = Transformer(grouped, hf.weights).forward(reference.at("input_ids"));
    EXPECT_TRUE(test::tensors_close(logits, expected, 1e-5));
    EXPECT_GT((expected - reference.at("logits")).abs().max().item<double>(), 1e-3);  // the norm matters
  } else {
    EXPECT_TRUE(test::tensors_close(logits, reference.at("logits"), 1e-4));
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCppLayouts, GgufMoeSsm,
                         ::testing::Values(Case{"tiny-mixtral-hf", "llama"}, Case{"tiny-qwen2-moe-hf", "qwen2moe"},
                                           Case{"tiny-qwen3-moe-hf", "qwen3moe"}, Case{"tiny-mamba-hf", "mamba"},
                                           Case{"tiny-mamba2-hf", "mamba2"}, Case{"tiny-jamba-hf", "jamba"}),
                         [](const auto& info) { return std::string(info.param.arch); });

}  // namespace
}  // namespace qeval
