// Hugging Face folders: config.json + model.safetensors (or shards with an index) for
// GPT2LMHeadModel and LlamaForCausalLM, mapped onto ModelConfig + ModelWeights.
//
// GPT-2: Conv1D weights are stored [in, out] and are transposed to [out, in]; c_attn stays
// fused (config.fused_qkv: the fused tensor is the quantisation unit, DESIGN §5, and the
// transformer splits its output into q, k, v); the head is tied to wte; the `transformer.`
// prefix may or may not be there. Llama: q/k as stored are laid out for HF's rotate-half
// rotary, so the config says RopePairing::half and nothing is permuted.
#include <fmt/format.h>

#include <type_traits>

#include "common/error.h"
#include "common/json_integer.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "loaders/checkpoints/safetensors_set.h"
#include "loaders/checkpoints/tensor_map.h"

namespace qeval {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSupportedArchitectures = "GPT2LMHeadModel (model_type gpt2), LlamaForCausalLM (model_type llama)";

// Required and optional config.json fields; type errors name the file and the key.
template <typename T>
T required(const json& j, const char* key, const std::string& file) {
  QEVAL_CHECK(j.contains(key) && !j[key].is_null(), "{}: missing required field \"{}\"", file, key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)  // json_integer.h says why
    return static_cast<T>(json_integer(j[key], fmt::format("{}: field \"{}\"", file, key)));
  try {
    return j[key].get<T>();
  } catch (const json::exception& e) {
    fail("{}: field \"{}\" has the wrong type ({}): {}", file, key, j[key].dump(), e.what());
  }
}

template <typename T>
T optional(const json& j, const char* key, T fallback, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return required<T>(j, key, file);
}

// bos/eos ids may be an int, a list (the first is used) or null.
std::optional<std::int64_t> token_id(const json& j, const char* key, const std::string& file, json& notes) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  if (v.is_array()) {
    if (v.empty()) return std::nullopt;
    notes[std::string(key) + "_all"] = v;
    return required<std::int64_t>(json{{key, v[0]}}, key, file);
  }
  return required<std::int64_t>(j, key, file);
}

std::string pick_architecture(const json& j, const std::string& file) {
  if (j.contains("architectures")) {
    QEVAL_CHECK(j["architectures"].is_array(), "{}: \"architectures\" should be a list, found {}", file,
                j["architectures"].dump());
    for (const auto& a : j["architectures"])
      if (a == "GPT2LMHeadModel" || a == "LlamaForCausalLM") return a.get<std::string>();
    fail("{}: unsupported architectures {}; supported: {}", file, j["architectures"].dump(), kSupportedArchitectures);
  }
  const std::string type = optional<std::string>(j, "model_type", "", file);
  if (type == "gpt2") return "GPT2LMHeadModel";
  if (type == "llama") return "LlamaForCausalLM";
  fail("{}: unsupported model_type \"{}\"; supported: {}", file, type, kSupportedArchitectures);
}

ModelConfig gpt2_config(const json& j, const std::string& file, json& notes) {
  ModelConfig c;
  c.architecture = "gpt2";
  c.vocab_size = required<std::int64_t>(j, "vocab_size", file);
  c.d_model = required<std::int64_t>(j, "n_embd", file);
  // Bounded before the n_inner default multiplies it (far above any GPT-2; validate() refuses <= 0).
  QEVAL_CHECK(c.d_model > 0 && c.d_model <= (std::int64_t{1} << 40), "{}: field \"n_embd\" is {}, expected 1..2^40",
              file, c.d_model);
  c.n_layers = required<std::int64_t>(j, "n_layer", file);
  c.n_heads = required<std::int64_t>(j, "n_head", file);
  c.n_kv_heads = c.n_heads;
  c.d_ff = optional<std::int64_t>(j, "n_inner", 4 * c.d_model, file);
  c.max_seq_len = optional<std::int64_t>(j, "n_positions", optional<std::int64_t>(j, "n_ctx", 0, file), file);
  const std::string act = optional<std::string>(j, "activation_function", "gelu_new", file);
  // All three are the tanh approximation qeval implements; "gelu" (erf) would differ slightly.
  QEVAL_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast",
              "{}: activation_function \"{}\" is not supported; expected gelu_new, gelu_pytorch_tanh or gelu_fast "
              "(the tanh approximation)",
              file, act);
  QEVAL_CHECK(optional<bool>(j, "scale_attn_weights", true, file), "{}: scale_attn_weights false is not supported",
              file);
  QEVAL_CHECK(!optional<bool>(j, "scale_attn_by_inverse_layer_idx", false, file),
              "{}: scale_attn_by_inverse_layer_idx true is not supported", file);
  QEVAL_CHECK(!optional<bool>(j, "add_cross_attention", false, file), "{}: add_cross_attention is not supported", file);
  c.norm = NormKind::layernorm;
  c.norm_eps = optional<double>(j, "layer_norm_epsilon", 1e-5, file);
  c.position = PositionKind::learned;
  c.mlp = MlpKind::gelu;
  c.attention_bias = c.mlp_bias = true;
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", true, file);
  c.fused_qkv = true;
  c.bos_id = token_id(j, "bos_token_id", file, notes);
  c.eos_id = token_id(j, "eos_token_id", file, notes);
  notes["activation_function"] = act;
  return c;
}

ModelConfig llama_config(const json& j, const std::string& file, json& notes) {
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = required<std::int64_t>(j, "vocab_size", file);
  c.d_model = required<std::int64_t>(j, "hidden_size", file);
  c.d_ff = required<std::int64_t>(j, "intermediate_size", file);
  c.n_layers = required<std::int64_t>(j, "num_hidden_layers", file);
  c.n_heads = required<std::int64_t>(j, "num_attention_heads", file);
  c.n_kv_heads = optional<std::int64_t>(j, "num_key_value_heads", c.n_heads, file);
  c.max_seq_len = optional<std::int64_t>(j, "max_position_embeddings", 0, file);
  const std::string act = optional<std::string>(j, "hidden_act", "silu", file);
  QEVAL_CHECK(act == "silu", "{}: hidden_act \"{}\" is not supported; expected silu (SwiGLU)", file, act);
  QEVAL_CHECK(!j.contains("rope_scaling") || j["rope_scaling"].is_null(),
              "{}: rope_scaling {} is not supported; expected null (plain rotary positions)", file,
              j.contains("rope_scaling") ? j["rope_scaling"].dump() : "");
  if (c.n_heads > 0 && j.contains("head_dim") && !j["head_dim"].is_null())
    QEVAL_CHECK(required<std::int64_t>(j, "head_dim", file) == c.d_model / c.n_heads,
                "{}: head_dim {} differs from hidden_size / num_attention_heads = {}; not supported", file,
                j["head_dim"].dump(), c.d_model / c.n_heads);
  c.norm = NormKind::rmsnorm;
  c.norm_eps = optional<double>(j, "rms_norm_eps", 1e-6, file);  // LlamaConfig's default
  c.position = PositionKind::rope;
  c.rope_pairing = RopePairing::half;
  c.rope_theta = optional<double>(j, "rope_theta", 10000.0, file);
  c.mlp = MlpKind::swiglu;
  c.attention_bias = optional<bool>(j, "attention_bias", false, file);
  c.mlp_bias = optional<bool>(j, "mlp_bias", false, file);
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, file);
  c.bos_id = token_id(j, "bos_token_id", file, notes);
  c.eos_id = token_id(j, "eos_token_id", file, notes);
  notes["max_position_embeddings"] = c.max_seq_len;
  notes["positions"] = "rope: max_position_embeddings is recorded, not a limit on evaluation windows";
  return c;
}

// The weight mappings take any tensor set with has() and take(name, shape): SafetensorsSet
// (folders) or TensorMap (torch.save state dicts).

// Conv1D [in, out] → [out, in].
template <typename Set>
at::Tensor conv1d(Set& set, const std::string& name, std::int64_t in, std::int64_t out) {
  return set.take(name, {in, out}).t().contiguous();
}

template <typename Set>
ModelWeights gpt2_weights(Set& set, const ModelConfig& c) {
  const std::string p = set.has("transformer.wte.weight") ? "transformer." : "";
  const std::int64_t D = c.d_model, F = c.d_ff;
  ModelWeights w;
  w.token_embedding = set.take(p + "wte.weight", {c.vocab_size, D});
  w.position_embedding = set.take(p + "wpe.weight", {c.max_seq_len, D});
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = fmt::format("{}h.{}.", p, i);
    BlockWeights blk;
    blk.attn_norm = {set.take(b + "ln_1.weight", {D}), set.take(b + "ln_1.bias", {D})};
    blk.qkv = {conv1d(set, b + "attn.c_attn.weight", D, 3 * D), set.take(b + "attn.c_attn.bias", {3 * D})};
    blk.o = {conv1d(set, b + "attn.c_proj.weight", D, D), set.take(b + "attn.c_proj.bias", {D})};
    blk.mlp_norm = {set.take(b + "ln_2.weight", {D}), set.take(b + "ln_2.bias", {D})};
    blk.up = {conv1d(set, b + "mlp.c_fc.weight", D, F), set.take(b + "mlp.c_fc.bias", {F})};
    blk.down = {conv1d(set, b + "mlp.c_proj.weight", F, D), set.take(b + "mlp.c_proj.bias", {D})};
    w.blocks.push_back(std::move(blk));
  }
  w.final_norm = {set.take(p + "ln_f.weight", {D}), set.take(p + "ln_f.bias", {D})};
  w.lm_head = c.tied_embeddings ? w.token_embedding : set.take("lm_head.weight", {c.vocab_size, D});
  return w;
}

template <typename Set>
LinearWeights llama_linear(Set& set, const std::string& name, std::int64_t out, std::int64_t in, bool bias) {
  LinearWeights l{set.take(name + ".weight", {out, in}), at::Tensor()};
  if (bias) l.bias = set.take(name + ".bias", {out});
  return l;
}

template <typename Set>
ModelWeights llama_weights(Set& set, const ModelConfig& c) {
  const std::int64_t D = c.d_model, F = c.d_ff, hd = c.head_dim();
  ModelWeights w;
  w.token_embedding = set.take("model.embed_tokens.weight", {c.vocab_size, D});
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = fmt::format("model.layers.{}.", i);
    BlockWeights blk;
    blk.attn_norm = {set.take(b + "input_layernorm.weight", {D}), at::Tensor()};
    blk.q = llama_linear(set, b + "self_attn.q_proj", c.n_heads * hd, D, c.attention_bias);
    blk.k = llama_linear(set, b + "self_attn.k_proj", c.n_kv_heads * hd, D, c.attention_bias);
    blk.v = llama_linear(set, b + "self_attn.v_proj", c.n_kv_heads * hd, D, c.attention_bias);
    blk.o = llama_linear(set, b + "self_attn.o_proj", D, c.n_heads * hd, c.attention_bias);
    blk.mlp_norm = {set.take(b + "post_attention_layernorm.weight", {D}), at::Tensor()};
    blk.gate = llama_linear(set, b + "mlp.gate_proj", F, D, c.mlp_bias);
    blk.up = llama_linear(set, b + "mlp.up_proj", F, D, c.mlp_bias);
    blk.down = llama_linear(set, b + "mlp.down_proj", D, F, c.mlp_bias);
    w.blocks.push_back(std::move(blk));
  }
  w.final_norm = {set.take("model.norm.weight", {D}), at::Tensor()};
  w.lm_head = c.tied_embeddings ? w.token_embedding : set.take("lm_head.weight", {c.vocab_size, D});
  return w;
}

// Tensors HF checkpoints carry that are not weights (causal-mask and rotary buffers) or that
// a tied head makes redundant; anything else left over means the mapping is wrong.
bool ignorable(const std::string& name, const ModelConfig& c) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || ends_with(".rotary_emb.inv_freq") ||
         (c.tied_embeddings && name == "lm_head.weight");
}

// config.json → out.config, format and notes; true for GPT-2.
bool read_hf_config(const fs::path& dir, LoadedCheckpoint& out) {
  const fs::path config_path = dir / "config.json";
  const std::string file = config_path.string();
  json j = read_json_file(config_path);
  QEVAL_CHECK(j.is_object(), "{}: expected a JSON object, found {}", file, j.type_name());
  const std::string arch = pick_architecture(j, file);
  out.notes["architecture"] = arch;
  if (j.contains("torch_dtype")) out.notes["torch_dtype"] = j["torch_dtype"];
  const bool gpt2 = arch == "GPT2LMHeadModel";
  out.config = gpt2 ? gpt2_config(j, file, out.notes) : llama_config(j, file, out.notes);
  out.format = gpt2 ? "hf-gpt2" : "hf-llama";
  out.config.validate(file);
  return gpt2;
}

}  // namespace

LoadedCheckpoint load_hf_tensors(const fs::path& config_dir, TensorMap& tensors) {
  LoadedCheckpoint out;
  const bool gpt2 = read_hf_config(config_dir, out);
  const std::string arch = out.notes["architecture"].get<std::string>();
  out.weights = gpt2 ? gpt2_weights(tensors, out.config) : llama_weights(tensors, out.config);
  json ignored = json::array();
  for (const auto& name : tensors.unused()) {
    QEVAL_CHECK(ignorable(name, out.config), "{}: unexpected tensor {} for {}; the checkpoint does not match {}",
                tensors.source(), name, arch, (config_dir / "config.json").string());
    ignored.push_back(name);
  }
  if (!ignored.empty()) out.notes["ignored_tensors"] = ignored;
  validate_weights(out.weights, out.config, tensors.source());
  return out;
}

LoadedCheckpoint load_hf_checkpoint(const fs::path& dir) {
  LoadedCheckpoint out;
  out.path = dir;
  const bool gpt2 = read_hf_config(dir, out);
  const std::string arch = out.notes["architecture"].get<std::string>();

  SafetensorsSet set = open_safetensors_folder(dir);
  out.weights = gpt2 ? gpt2_weights(set, out.config) : llama_weights(set, out.config);
  json ignored = json::array();
  for (const auto& name : set.unused()) {
    QEVAL_CHECK(ignorable(name, out.config), "{}: unexpected tensor {} in {} for {}; the checkpoint does not match its config",
                dir.string(), name, set.file_of(name).path().filename().string(), arch);
    ignored.push_back(name);
  }
  if (!ignored.empty()) out.notes["ignored_tensors"] = ignored;
  json files = json::array();
  for (const auto& p : set.paths()) files.push_back(p.filename().string());
  out.notes["weight_files"] = files;
  validate_weights(out.weights, out.config, dir.string());
  out.weights_hash = hash_weight_files(set.paths());
  return out;
}

}  // namespace qeval
