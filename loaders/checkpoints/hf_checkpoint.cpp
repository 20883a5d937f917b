// Hugging Face folders: config.json + model.safetensors (or shards with an index) for GPT-2,
// Llama, Qwen2, Qwen3, Mistral, Gemma-3, Phi-3, GPT-NeoX and OPT, mapped onto ModelConfig +
// ModelWeights (config.json is read in hf_config.cpp).
//
// GPT-2: Conv1D weights are stored [in, out] and are transposed to [out, in]; c_attn stays
// fused (config.fused_qkv: the fused tensor is the quantisation unit, DESIGN §5, and the
// transformer splits its output into q, k, v); the head is tied to wte; the `transformer.`
// prefix may or may not be there. Llama and every other rotary family: q/k as stored are laid out
// for HF's rotate-half rotary, so the config says RopePairing::half and nothing is permuted.
// Gemma's norm gains are stored as w and applied as (1 + w): the 1 is added here. Phi-3's fused
// qkv_proj and gate_up_proj stay fused (DESIGN §5). GPT-NeoX's query_key_value stays fused, its rows
// regrouped from per-head [q k v] into [q; k; v]. OPT's position table loses its two offset rows.
#include <fmt/format.h>

#include <type_traits>

#include "common/error.h"
#include "common/json_integer.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "loaders/checkpoints/hf_config.h"
#include "loaders/checkpoints/model_reader.h"
#include "loaders/checkpoints/model_reader_internal.h"
#include "loaders/checkpoints/quantized_tensor_set.h"
#include "loaders/checkpoints/safetensors_set.h"
#include "loaders/checkpoints/weights_hash.h"
#include "loaders/checkpoints/tensor_map.h"

namespace qeval {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The weight mappings take any tensor set with has() and take(name, shape): SafetensorsSet
// (folders, read by parts) or TensorMap (torch.save state dicts). Each part of the model is mapped
// on its own, so a reader can read one block at a time (loaders/checkpoints/model_reader.h).

// Conv1D [in, out] → [out, in].
template <typename Set>
at::Tensor conv1d(Set& set, const std::string& name, std::int64_t in, std::int64_t out) {
  return set.take(name, {in, out}).t().contiguous();
}

template <typename Set>
LinearWeights hf_linear(Set& set, const std::string& name, std::int64_t out, std::int64_t in, bool bias) {
  LinearWeights l{set.take(name + ".weight", {out, in}), at::Tensor()};
  if (bias) l.bias = set.take(name + ".bias", {out});
  return l;
}

template <typename Set>
NormWeights hf_norm(Set& set, const std::string& name, std::int64_t width, bool with_bias, bool plus_one) {
  NormWeights n{set.take(name + ".weight", {width}), at::Tensor()};
  if (plus_one) n.weight = n.weight + 1;  // Gemma: (1 + w), computed in float32 as HF does
  if (with_bias) n.bias = set.take(name + ".bias", {width});
  return n;
}

// GPT-2: [transformer.]h.{i}.*; the prefix ("transformer." or "") is found on open.
template <typename Set>
BlockWeights gpt2_block(Set& set, const HfModel& m, std::int64_t i) {
  const ModelConfig& c = m.config;
  const std::int64_t D = c.d_model, F = c.d_ff;
  const std::string b = fmt::format("{}h.{}.", m.prefix, i);
  BlockWeights blk;
  blk.attn_norm = {set.take(b + "ln_1.weight", {D}), set.take(b + "ln_1.bias", {D})};
  blk.qkv = {conv1d(set, b + "attn.c_attn.weight", D, 3 * D), set.take(b + "attn.c_attn.bias", {3 * D})};
  blk.o = {conv1d(set, b + "attn.c_proj.weight", D, D), set.take(b + "attn.c_proj.bias", {D})};
  blk.mlp_norm = {set.take(b + "ln_2.weight", {D}), set.take(b + "ln_2.bias", {D})};
  blk.up = {conv1d(set, b + "mlp.c_fc.weight", D, F), set.take(b + "mlp.c_fc.bias", {F})};
  blk.down = {conv1d(set, b + "mlp.c_proj.weight", F, D), set.take(b + "mlp.c_proj.bias", {D})};
  return blk;
}

// Routed experts under `p`: the router (Mixtral and Qwen "gate", Jamba "router") and each expert's
// projections (Mixtral w1 = gate, w3 = up, w2 = down; the others gate_proj / up_proj / down_proj),
// and Qwen2-MoE's shared expert with its sigmoid gate.
template <typename Set>
MoeWeights hf_moe(Set& set, const HfModel& m, const std::string& p) {
  const ModelConfig& c = m.config;
  const std::int64_t D = c.d_model, F = c.expert_d_ff(), E = c.moe_experts;
  const bool mixtral = m.family == HfFamily::mixtral;
  MoeWeights w;
  w.router = set.take(p + (m.family == HfFamily::jamba ? "router.weight" : "gate.weight"), {E, D});
  for (std::int64_t e = 0; e < E; ++e) {
    const std::string x = fmt::format("{}experts.{}.", p, e);
    MoeWeights::Expert ex;
    ex.gate = hf_linear(set, x + (mixtral ? "w1" : "gate_proj"), F, D, false);
    ex.up = hf_linear(set, x + (mixtral ? "w3" : "up_proj"), F, D, false);
    ex.down = hf_linear(set, x + (mixtral ? "w2" : "down_proj"), D, F, false);
    w.experts.push_back(std::move(ex));
  }
  if (c.moe_shared_d_ff > 0) {
    const std::int64_t S = c.moe_shared_d_ff;
    w.shared.gate = hf_linear(set, p + "shared_expert.gate_proj", S, D, false);
    w.shared.up = hf_linear(set, p + "shared_expert.up_proj", S, D, false);
    w.shared.down = hf_linear(set, p + "shared_expert.down_proj", D, S, false);
  }
  if (c.moe_shared_gate) w.shared_gate = set.take(p + "shared_expert_gate.weight", {1, D});
  return w;
}

// A = −exp(A_log) in float32, as HF's mixers compute it.
template <typename Set>
at::Tensor hf_ssm_A(Set& set, const std::string& name, std::vector<std::int64_t> shape) {
  at::Tensor a_log = set.take(name, shape);
  return a_log.is_meta() ? a_log : a_log.exp().neg();
}

// The depthwise nn.Conv1d: weight [C, 1, K] → [C, K].
template <typename Set>
void hf_ssm_conv(Set& set, const ModelConfig& c, MixerKind kind, const std::string& p, SsmWeights& w) {
  const std::int64_t C = c.ssm_conv_dim(kind);
  w.conv_weight = set.take(p + "conv1d.weight", {C, 1, c.ssm_d_conv}).reshape({C, c.ssm_d_conv});
  if (c.ssm_conv_bias) w.conv_bias = set.take(p + "conv1d.bias", {C});
}

// Mamba's mixer (MambaMixer; Jamba's JambaMambaMixer adds dt/b/c_layernorm) under `p`.
template <typename Set>
SsmWeights hf_mamba_mixer(Set& set, const ModelConfig& c, const std::string& p) {
  const std::int64_t D = c.d_model, E = c.ssm_d_inner, N = c.ssm_d_state, R = c.ssm_dt_rank;
  SsmWeights w;
  w.in_proj = hf_linear(set, p + "in_proj", 2 * E, D, c.ssm_proj_bias);
  hf_ssm_conv(set, c, MixerKind::mamba, p, w);
  w.x_proj = hf_linear(set, p + "x_proj", R + 2 * N, E, false);
  w.dt_proj = hf_linear(set, p + "dt_proj", E, R, true);
  w.A = hf_ssm_A(set, p + "A_log", {E, N});
  w.D = set.take(p + "D", {E});
  w.out_proj = hf_linear(set, p + "out_proj", D, E, c.ssm_proj_bias);
  if (c.ssm_bcdt_norm) {
    w.dt_norm = hf_norm(set, p + "dt_layernorm", R, false, false);
    w.b_norm = hf_norm(set, p + "b_layernorm", N, false, false);
    w.c_norm = hf_norm(set, p + "c_layernorm", N, false, false);
  }
  return w;
}

// Mamba-2's mixer (Mamba2Mixer) under `p`.
template <typename Set>
SsmWeights hf_mamba2_mixer(Set& set, const ModelConfig& c, const std::string& p) {
  const std::int64_t D = c.d_model, E = c.ssm_d_inner, H = c.ssm_heads;
  SsmWeights w;
  w.in_proj = hf_linear(set, p + "in_proj", E + c.ssm_conv_dim(MixerKind::mamba2) + H, D, c.ssm_proj_bias);
  hf_ssm_conv(set, c, MixerKind::mamba2, p, w);
  w.dt_bias = set.take(p + "dt_bias", {H});
  w.A = hf_ssm_A(set, p + "A_log", {H});
  w.D = set.take(p + "D", {H});
  w.norm = hf_norm(set, p + "norm", E, false, false);
  w.out_proj = hf_linear(set, p + "out_proj", D, E, c.ssm_proj_bias);
  return w;
}

// Mamba / Mamba-2: backbone.layers.{i}.{norm, mixer.*}, a mixer and no feed-forward.
template <typename Set>
BlockWeights mamba_block(Set& set, const HfModel& m, std::int64_t i) {
  const ModelConfig& c = m.config;
  const std::string b = fmt::format("{}layers.{}.", m.prefix, i);
  BlockWeights blk;
  blk.attn_norm = hf_norm(set, b + "norm", c.d_model, false, false);
  blk.ssm = c.mixer(i) == MixerKind::mamba ? hf_mamba_mixer(set, c, b + "mixer.") : hf_mamba2_mixer(set, c, b + "mixer.");
  return blk;
}

// Jamba: model.layers.{i}.{input_layernorm, self_attn.* | mamba.*, pre_ff_layernorm, feed_forward.*}.
template <typename Set>
BlockWeights jamba_block(Set& set, const HfModel& m, std::int64_t i) {
  const ModelConfig& c = m.config;
  const std::int64_t D = c.d_model, F = c.d_ff, hd = c.head_dim();
  const std::string b = fmt::format("{}layers.{}.", m.prefix, i);
  BlockWeights blk;
  blk.attn_norm = hf_norm(set, b + "input_layernorm", D, false, false);
  if (c.mixer(i) == MixerKind::attention) {
    blk.q = hf_linear(set, b + "self_attn.q_proj", c.n_heads * hd, D, false);
    blk.k = hf_linear(set, b + "self_attn.k_proj", c.n_kv_heads * hd, D, false);
    blk.v = hf_linear(set, b + "self_attn.v_proj", c.n_kv_heads * hd, D, false);
    blk.o = hf_linear(set, b + "self_attn.o_proj", D, c.n_heads * hd, false);
  } else {
    blk.ssm = hf_mamba_mixer(set, c, b + "mamba.");
  }
  blk.mlp_norm = hf_norm(set, b + "pre_ff_layernorm", D, false, false);
  if (c.ffn(i) == FfnKind::moe) {
    blk.moe = hf_moe(set, m, b + "feed_forward.");
  } else {
    blk.gate = hf_linear(set, b + "feed_forward.gate_proj", F, D, false);
    blk.up = hf_linear(set, b + "feed_forward.up_proj", F, D, false);
    blk.down = hf_linear(set, b + "feed_forward.down_proj", D, F, false);
  }
  return blk;
}

// Llama, Qwen2/3, Mistral, Gemma-3, Phi-3: model.layers.{i}.{input_layernorm, self_attn.*, mlp.*, ...}.
template <typename Set>
BlockWeights rotary_decoder_block(Set& set, const HfModel& m, std::int64_t i) {
  const ModelConfig& c = m.config;
  const std::int64_t D = c.d_model, F = c.d_ff, hd = c.head_dim();
  auto norm = [&](const std::string& name, std::int64_t width) { return hf_norm(set, name, width, false, m.norm_plus_one); };
  const std::string b = fmt::format("{}layers.{}.", m.prefix, i);
  BlockWeights blk;
  blk.attn_norm = norm(b + "input_layernorm", D);
  if (c.fused_qkv) {
    blk.qkv = hf_linear(set, b + "self_attn.qkv_proj", (c.n_heads + 2 * c.n_kv_heads) * hd, D, c.has_qkv_bias());
  } else {
    blk.q = hf_linear(set, b + "self_attn.q_proj", c.n_heads * hd, D, c.has_qkv_bias());
    blk.k = hf_linear(set, b + "self_attn.k_proj", c.n_kv_heads * hd, D, c.has_qkv_bias());
    blk.v = hf_linear(set, b + "self_attn.v_proj", c.n_kv_heads * hd, D, c.has_qkv_bias());
  }
  blk.o = hf_linear(set, b + "self_attn.o_proj", D, c.n_heads * hd, c.attention_bias);
  if (c.qk_norm) {
    blk.q_norm = norm(b + "self_attn.q_norm", hd);
    blk.k_norm = norm(b + "self_attn.k_norm", hd);
  }
  if (c.sandwich_norms) {  // Gemma-3's four norms per block
    blk.post_attn_norm = norm(b + "post_attention_layernorm", D);
    blk.mlp_norm = norm(b + "pre_feedforward_layernorm", D);
    blk.post_mlp_norm = norm(b + "post_feedforward_layernorm", D);
  } else {
    blk.mlp_norm = norm(b + "post_attention_layernorm", D);
  }
  if (c.ffn(i) == FfnKind::moe) {
    blk.moe = hf_moe(set, m, b + (m.family == HfFamily::mixtral ? "block_sparse_moe." : "mlp."));
  } else if (c.fused_gate_up) {
    blk.gate_up = hf_linear(set, b + "mlp.gate_up_proj", 2 * F, D, c.mlp_bias);
  } else {
    blk.gate = hf_linear(set, b + "mlp.gate_proj", F, D, c.mlp_bias);
    blk.up = hf_linear(set, b + "mlp.up_proj", F, D, c.mlp_bias);
  }
  if (c.ffn(i) == FfnKind::dense) blk.down = hf_linear(set, b + "mlp.down_proj", D, F, c.mlp_bias);
  return blk;
}

// GPT-NeoX / Pythia. query_key_value's rows are [head 0: q k v, head 1: q k v, ...] (HF views its
// output as [.., H, 3 hd]); they are regrouped into [q; k; v], the fused layout the transformer splits.
template <typename Set>
BlockWeights gpt_neox_block(Set& set, const HfModel& m, std::int64_t i) {
  const ModelConfig& c = m.config;
  const std::int64_t D = c.d_model, F = c.d_ff, H = c.n_heads, hd = c.head_dim();
  auto regroup = [&](const at::Tensor& t) {  // [H * 3 * hd, ...] → [3 * H * hd, ...]
    std::vector<std::int64_t> shape{H, 3, hd};
    for (std::int64_t d = 1; d < t.dim(); ++d) shape.push_back(t.size(d));
    std::vector<std::int64_t> out_shape{3 * H * hd};
    for (std::int64_t d = 1; d < t.dim(); ++d) out_shape.push_back(t.size(d));
    return t.reshape(shape).transpose(0, 1).contiguous().reshape(out_shape);
  };
  const std::string b = fmt::format("{}layers.{}.", m.prefix, i);
  BlockWeights blk;
  blk.attn_norm = hf_norm(set, b + "input_layernorm", D, true, false);
  blk.qkv = hf_linear(set, b + "attention.query_key_value", 3 * D, D, c.attention_bias);
  blk.qkv.weight = regroup(blk.qkv.weight);
  if (blk.qkv.bias.defined()) blk.qkv.bias = regroup(blk.qkv.bias);
  blk.o = hf_linear(set, b + "attention.dense", D, D, c.attention_bias);
  blk.mlp_norm = hf_norm(set, b + "post_attention_layernorm", D, true, false);
  blk.up = hf_linear(set, b + "mlp.dense_h_to_4h", F, D, true);
  blk.down = hf_linear(set, b + "mlp.dense_4h_to_h", D, F, true);
  return blk;
}

// OPT: model.decoder.*; embed_positions has two extra leading rows (position p reads row p + 2).
template <typename Set>
BlockWeights opt_block(Set& set, const HfModel& m, std::int64_t i) {
  const ModelConfig& c = m.config;
  const std::int64_t D = c.d_model, F = c.d_ff;
  const std::string b = fmt::format("{}layers.{}.", m.prefix, i);
  BlockWeights blk;
  blk.attn_norm = hf_norm(set, b + "self_attn_layer_norm", D, true, false);
  blk.q = hf_linear(set, b + "self_attn.q_proj", D, D, c.attention_bias);
  blk.k = hf_linear(set, b + "self_attn.k_proj", D, D, c.attention_bias);
  blk.v = hf_linear(set, b + "self_attn.v_proj", D, D, c.attention_bias);
  blk.o = hf_linear(set, b + "self_attn.out_proj", D, D, c.attention_bias);
  blk.mlp_norm = hf_norm(set, b + "final_layer_norm", D, true, false);
  blk.up = hf_linear(set, b + "fc1", F, D, c.mlp_bias);
  blk.down = hf_linear(set, b + "fc2", D, F, c.mlp_bias);
  return blk;
}

// Gemma3ForConditionalGeneration's text part and GPT-2's optional "transformer." prefix depend on
// which names the files hold.
template <typename Set>
void settle_prefix(Set& set, HfModel& m) {
  if (m.architecture == "Gemma3ForConditionalGeneration") {  // the text part's prefix differs by transformers version
    for (auto [prefix, head] : {std::pair{"model.language_model.", "lm_head.weight"},
                                std::pair{"language_model.model.", "language_model.lm_head.weight"}})
      if (set.has(std::string(prefix) + "embed_tokens.weight")) m.prefix = prefix, m.lm_head = head;
  }
  if (m.family == HfFamily::gpt2) m.prefix = set.has("transformer.wte.weight") ? "transformer." : "";
  // Older Mamba checkpoints name it "embedding" (HF's load hook renames it to "embeddings").
  if ((m.family == HfFamily::mamba || m.family == HfFamily::mamba2) && set.has(m.prefix + "embedding.weight"))
    m.embedding = m.prefix + "embedding.weight";
}

// The names of the parts read by rows: the token embedding and an untied head.
std::string token_embedding_name(const HfModel& m) {
  if (!m.embedding.empty()) return m.embedding;
  switch (m.family) {
    case HfFamily::gpt2: return m.prefix + "wte.weight";
    case HfFamily::gpt_neox: return m.prefix + "embed_in.weight";
    case HfFamily::mamba:
    case HfFamily::mamba2: return m.prefix + "embeddings.weight";
    default: return m.prefix + "embed_tokens.weight";
  }
}
std::string lm_head_name(const HfModel& m) {
  return m.config.tied_embeddings ? token_embedding_name(m) : (m.family == HfFamily::gpt2 ? "lm_head.weight" : m.lm_head);
}

template <typename Set>
BlockWeights hf_block(Set& set, const HfModel& m, std::int64_t i) {
  switch (m.family) {
    case HfFamily::gpt2: return gpt2_block(set, m, i);
    case HfFamily::gpt_neox: return gpt_neox_block(set, m, i);
    case HfFamily::opt: return opt_block(set, m, i);
    case HfFamily::mamba:
    case HfFamily::mamba2: return mamba_block(set, m, i);
    case HfFamily::jamba: return jamba_block(set, m, i);
    default: return rotary_decoder_block(set, m, i);
  }
}

template <typename Set>
NormWeights hf_final_norm(Set& set, const HfModel& m) {
  const std::int64_t D = m.config.d_model;
  switch (m.family) {
    case HfFamily::gpt2: return {set.take(m.prefix + "ln_f.weight", {D}), set.take(m.prefix + "ln_f.bias", {D})};
    case HfFamily::gpt_neox: return hf_norm(set, m.prefix + "final_layer_norm", D, true, false);
    case HfFamily::opt: return hf_norm(set, m.prefix + "final_layer_norm", D, true, false);
    case HfFamily::mamba:
    case HfFamily::mamba2: return hf_norm(set, m.prefix + "norm_f", D, false, false);
    case HfFamily::jamba: return hf_norm(set, m.prefix + "final_layernorm", D, false, false);
    default: return hf_norm(set, m.prefix + "norm", D, false, m.norm_plus_one);
  }
}

template <typename Set>
at::Tensor hf_position_embedding(Set& set, const HfModel& m) {
  const ModelConfig& c = m.config;
  switch (m.family) {
    case HfFamily::gpt2: return set.take(m.prefix + "wpe.weight", {c.max_seq_len, c.d_model});
    case HfFamily::opt:
      return set.take(m.prefix + "embed_positions.weight", {c.max_seq_len + 2, c.d_model}).narrow(0, 2, c.max_seq_len).contiguous();
    default: return at::Tensor();
  }
}

// The whole model (torch.save state dicts, already in memory).
template <typename Set>
ModelWeights hf_weights(Set& set, HfModel& m) {
  settle_prefix(set, m);
  const ModelConfig& c = m.config;
  ModelWeights w;
  w.token_embedding = set.take(token_embedding_name(m), {c.vocab_size, c.d_model});
  w.position_embedding = hf_position_embedding(set, m);
  for (std::int64_t i = 0; i < c.n_layers; ++i) w.blocks.push_back(hf_block(set, m, i));
  w.final_norm = hf_final_norm(set, m);
  w.lm_head = c.tied_embeddings ? w.token_embedding : set.take(lm_head_name(m), {c.vocab_size, c.d_model});
  return w;
}

// Tensors HF checkpoints carry that are not weights (causal-mask and rotary buffers) or that
// a tied head makes redundant; anything else left over means the mapping is wrong.
bool ignorable(const std::string& name, const ModelConfig& c) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  auto starts_with = [&](const std::string& prefix) { return name.compare(0, prefix.size(), prefix) == 0; };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || ends_with(".attention.bias") ||
         ends_with(".attention.masked_bias") || ends_with(".rotary_emb.inv_freq") ||
         (c.tied_embeddings && (name == "lm_head.weight" || name == "embed_out.weight" ||
                                name == "language_model.lm_head.weight")) ||
         // Gemma3ForConditionalGeneration: only the language model is evaluated.
         starts_with("vision_tower.") || starts_with("model.vision_tower.") || starts_with("multi_modal_projector.") ||
         starts_with("model.multi_modal_projector.");
}

// config.json → out.config, format and notes; its quantisation settings into `quant` when asked.
HfModel read_hf_config(const fs::path& dir, LoadedCheckpoint& out, std::optional<QuantizationConfig>* quant = nullptr) {
  const fs::path config_path = dir / "config.json";
  const std::string file = config_path.string();
  json j = read_json_file(config_path);
  QEVAL_CHECK(j.is_object(), "{}: expected a JSON object, found {}", file, j.type_name());
  HfModel m = read_hf_model_config(j, file, out.notes);
  out.notes["architecture"] = m.architecture;
  if (j.contains("torch_dtype")) out.notes["torch_dtype"] = j["torch_dtype"];
  out.config = m.config;
  out.format = m.format;
  if (quant) *quant = read_quantization_config(j, dir);
  return m;
}

// As GGUF records say which block types were dequantised (gguf_checkpoint.cpp): the stored
// format, the modules dequantised from each form, and what full precision means for this model.
void add_quantization_notes(const QuantizedTensorSet& set, json& notes) {
  if (!set.config()) return;
  json q = set.config()->describe();
  q["dequantized_modules"] = set.dequantised();
  notes["quantization"] = q;
  notes["dequantized_from"] = set.dequantised();
  notes["full_precision"] = fmt::format(
      "weights dequantised to float32 from the stored {} {} checkpoint (quant/formats codecs, equal to the library's "
      "dequantisation in float32): full precision for this model means its dequantised weights, not the original "
      "unquantised model",
      quant_method_name(set.config()->method), set.config()->format);
}

}  // namespace

LoadedCheckpoint load_hf_tensors(const fs::path& config_dir, TensorMap& tensors) {
  LoadedCheckpoint out;
  HfModel m = read_hf_config(config_dir, out);
  out.weights = hf_weights(tensors, m);
  json ignored = json::array();
  for (const auto& name : tensors.unused()) {
    QEVAL_CHECK(ignorable(name, out.config), "{}: unexpected tensor {} for {}; the checkpoint does not match {}",
                tensors.source(), name, m.architecture, (config_dir / "config.json").string());
    ignored.push_back(name);
  }
  if (!ignored.empty()) out.notes["ignored_tensors"] = ignored;
  validate_weights(out.weights, out.config, tensors.source());
  return out;
}

namespace {

// A Hugging Face safetensors folder read by parts: the headers are checked on open (every tensor
// the config implies, none left over), tensors are read when their part is.
class HfReader final : public ModelReader {
 public:
  explicit HfReader(const fs::path& dir) : ModelReader(LoadedCheckpoint{}), set_(dir.string()) {
    info_.path = dir;
    std::optional<QuantizationConfig> quant;
    m_ = read_hf_config(dir, info_, &quant);
    set_ = open_safetensors_folder(dir);
    tensors_set_ = std::make_unique<QuantizedTensorSet>(set_, std::move(quant));
    QuantizedTensorSet& set = *tensors_set_;
    hashes_ = std::make_shared<TensorHashes>();
    set_.hash_reads_into(hashes_);  // the weights hash comes from the reads (of the stored, quantised bytes)
    settle_prefix(set, m_);
    set_.set_header_only(true);
    measure_parts(*this, sizes_, dir.string());
    set_.set_header_only(false);
    json ignored = json::array();
    for (const auto& name : set_.unused()) {
      QEVAL_CHECK(ignorable(name, info_.config) || set.is_declared_activation_tensor(name),
                  "{}: unexpected tensor {} in {} for {}; the checkpoint does not match its config",
                  dir.string(), name, set_.file_of(name).path().filename().string(), m_.architecture);
      ignored.push_back(name);
    }
    if (!ignored.empty()) info_.notes["ignored_tensors"] = ignored;
    add_quantization_notes(set, info_.notes);
    json files = json::array();
    for (const auto& p : set_.paths()) files.push_back(p.filename().string());
    info_.notes["weight_files"] = files;
    weight_files_ = set_.paths();
    sizes_.stored = set_.stored_bytes();
    list_safetensors(set_, tensors_, bytes_on_disk_);
  }

  at::Tensor position_embedding() override { return hf_position_embedding(*tensors_set_, m_); }
  BlockWeights block(std::int64_t layer) override { return hf_block(*tensors_set_, m_, layer); }
  std::vector<FileSpan> block_file_spans(std::int64_t layer) override {
    return set_.spans_taken_by([&] { hf_block(*tensors_set_, m_, layer); });
  }
  NormWeights final_norm() override { return hf_final_norm(*tensors_set_, m_); }
  at::Tensor lm_head_rows(std::int64_t begin, std::int64_t count) override {
    return set_.take_rows(lm_head_name(m_), {config().vocab_size, config().d_model}, begin, count);
  }

 private:
  at::Tensor token_embedding_block(std::int64_t begin, std::int64_t count) override {
    return set_.take_rows(token_embedding_name(m_), {config().vocab_size, config().d_model}, begin, count);
  }

  SafetensorsSet set_;
  std::unique_ptr<QuantizedTensorSet> tensors_set_;  // set_ seen through the folder's quantization_config
  HfModel m_;
};

}  // namespace

std::unique_ptr<ModelReader> open_hf_checkpoint(const fs::path& dir) { return std::make_unique<HfReader>(dir); }

LoadedCheckpoint load_hf_checkpoint(const fs::path& dir) { return open_hf_checkpoint(dir)->read_all(); }

}  // namespace qeval
