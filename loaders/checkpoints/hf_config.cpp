#include "loaders/checkpoints/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/error.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "model/config_validation.h"

namespace qeval {

using nlohmann::json;
using F = ConfigField;

namespace {

constexpr const char* kSupportedArchitectures =
    "GPT2LMHeadModel (model_type gpt2), LlamaForCausalLM (llama), Qwen2ForCausalLM (qwen2), Qwen3ForCausalLM (qwen3), "
    "MistralForCausalLM (mistral), Gemma3ForCausalLM (gemma3_text), Gemma3ForConditionalGeneration (gemma3, text part), "
    "Phi3ForCausalLM (phi3), GPTNeoXForCausalLM (gpt_neox), OPTForCausalLM (opt)";

struct ArchitectureName {
  HfFamily family;
  const char* architecture;
  const char* model_type;
  const char* format;
};
const ArchitectureName kArchitectures[] = {
    {HfFamily::gpt2, "GPT2LMHeadModel", "gpt2", "hf-gpt2"},
    {HfFamily::llama, "LlamaForCausalLM", "llama", "hf-llama"},
    {HfFamily::qwen2, "Qwen2ForCausalLM", "qwen2", "hf-qwen2"},
    {HfFamily::qwen3, "Qwen3ForCausalLM", "qwen3", "hf-qwen3"},
    {HfFamily::mistral, "MistralForCausalLM", "mistral", "hf-mistral"},
    {HfFamily::gemma3, "Gemma3ForCausalLM", "gemma3_text", "hf-gemma3"},
    {HfFamily::gemma3, "Gemma3ForConditionalGeneration", "gemma3", "hf-gemma3"},
    {HfFamily::phi3, "Phi3ForCausalLM", "phi3", "hf-phi3"},
    {HfFamily::gpt_neox, "GPTNeoXForCausalLM", "gpt_neox", "hf-gpt-neox"},
    {HfFamily::opt, "OPTForCausalLM", "opt", "hf-opt"},
};

// Required and optional config.json fields; type errors name the file and the key.
template <typename T>
T required(const json& j, const char* key, const std::string& file) {
  QEVAL_CHECK(j.contains(key) && !j[key].is_null(), "{}: missing required field \"{}\"", file, key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)  // json_integer.h says why
    return static_cast<T>(json_integer(j[key], fmt::format("{}: field \"{}\"", file, key)));
  try {
    return j[key].get<T>();
  } catch (const json::exception& e) {
    fail("{}: field \"{}\" has the wrong type ({}): {}", file, key, json_text(j[key]), e.what());
  }
}

template <typename T>
T optional(const json& j, const char* key, T fallback, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return required<T>(j, key, file);
}

// bos/eos ids may be an int, a list (the first is used) or null.
std::optional<std::int64_t> token_id(const json& j, const char* key, ConfigField field, ConfigSource& src, json& notes) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  if (v.is_array()) {
    if (v.empty()) return std::nullopt;
    notes[std::string(key) + "_all"] = v;
    for (const auto& id : v) src.integer_value(field, key, id);  // every listed id in the domain
    return src.integer_value(field, key, v[0]);
  }
  return src.integer_value(field, key, v);
}

const ArchitectureName& pick_architecture(const json& j, const std::string& file) {
  if (j.contains("architectures")) {
    QEVAL_CHECK(j["architectures"].is_array(), "{}: \"architectures\" should be a list, found {}", file,
                json_text(j["architectures"]));
    for (const auto& a : j["architectures"])
      for (const auto& known : kArchitectures)
        if (a == known.architecture) return known;
    fail("{}: unsupported architectures {}; supported: {}", file, json_text(j["architectures"]), kSupportedArchitectures);
  }
  const std::string type = optional<std::string>(j, "model_type", "", file);
  for (const auto& known : kArchitectures)
    if (type == known.model_type) return known;
  fail("{}: unsupported model_type {}; supported: {}", file, in_quotes(type), kSupportedArchitectures);
}

// Plain rotary only: rope_scaling null (or {"rope_type": "default"}); transformers 5's
// "rope_parameters" carries the base (per layer type for Gemma-3). A rope_parameters object
// holding nothing but the base (and the rotary fraction) is plain; any other object must say its
// type (ConfigSource::rope_scaling refuses one without).
double rope_theta(const json& j, ConfigSource& src, double fallback, const char* layer_type = nullptr) {
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json* p = &j["rope_parameters"];
    std::string key = "rope_parameters";
    if (layer_type && p->contains(layer_type)) p = &(*p)[layer_type], key += std::string(".") + layer_type;
    bool base_only = p->is_object();
    for (const auto& [k, v] : p->items()) base_only &= k == "rope_theta" || k == "partial_rotary_factor";
    if (!base_only) src.rope_scaling(*p, key);
    if (!p->contains("rope_theta") || (*p)["rope_theta"].is_null()) return fallback;
    return src.real_value(F::rope_theta, key + ".rope_theta", (*p)["rope_theta"]);
  }
  if (j.contains("rope_scaling")) src.rope_scaling(j["rope_scaling"], "rope_scaling");
  return src.real(F::rope_theta, j, "rope_theta").value_or(fallback);
}

// Per-layer windows from "layer_types" ("full_attention" / "sliding_attention"), when the config has it.
// `window`: the declared sliding window (nullopt: none).
bool windows_from_layer_types(const json& j, const ConfigSource& src, ModelConfig& c, std::optional<std::int64_t> window) {
  if (!j.contains("layer_types") || j["layer_types"].is_null()) return false;
  const json& types = j["layer_types"];
  QEVAL_CHECK(types.is_array() && static_cast<std::int64_t>(types.size()) == c.n_layers,
              "{}: \"layer_types\" should list {} layer types ({} {}), found {}", src.file(), c.n_layers,
              src.key(F::n_layers), c.n_layers, json_text(types));
  for (const auto& t : types) {
    QEVAL_CHECK(t == "full_attention" || t == "sliding_attention",
                "{}: layer type {} is not supported; expected full_attention or sliding_attention", src.file(),
                json_text(t));
    QEVAL_CHECK(t == "full_attention" || window, "{}: sliding_attention layers but no {}", src.file(),
                src.key(F::attention_window));
    c.attention_windows.push_back(t == "sliding_attention" ? *window : 0);
  }
  // All global is the default: no list (so the config and records read as for a model without windows).
  if (std::all_of(c.attention_windows.begin(), c.attention_windows.end(), [](std::int64_t w) { return w == 0; }))
    c.attention_windows.clear();
  return true;
}

void all_layers_windowed(ModelConfig& c, std::optional<std::int64_t> window) {
  if (window) c.attention_windows.assign(static_cast<std::size_t>(c.n_layers), *window);
}

// The declared sliding window: absent or null is none; a value must be >= 1 (ConfigSource).
std::optional<std::int64_t> sliding_window(const json& j, ConfigSource& src, std::optional<std::int64_t> fallback) {
  src.name(F::attention_window, "sliding_window");
  if (!j.contains("sliding_window") || j["sliding_window"].is_null()) return fallback;
  return src.integer(F::attention_window, j, "sliding_window");
}

void note_windows(const ModelConfig& c, json& notes) {
  if (c.attention_windows.empty()) return;
  notes["attention_windows"] = c.attention_windows;
  notes["sliding_window"] = "query i sees keys j with 0 <= i - j < window (HF's sliding-window mask); 0 = global";
}

ModelConfig gpt2_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  ModelConfig c;
  c.architecture = "gpt2";
  c.vocab_size = src.required_integer(F::vocab_size, j, "vocab_size");
  c.d_model = src.required_integer(F::d_model, j, "n_embd");
  c.n_layers = src.required_integer(F::n_layers, j, "n_layer");
  c.n_heads = src.required_integer(F::n_heads, j, "n_head");
  c.n_kv_heads = c.n_heads;
  src.name(F::n_kv_heads, "n_head");
  src.name(F::d_ff, "n_inner");
  c.d_ff = src.integer(F::d_ff, j, "n_inner").value_or(4 * c.d_model);  // d_model <= 2^31: no overflow
  src.name(F::max_seq_len, "n_positions");
  const std::optional<std::int64_t> positions = src.integer(F::max_seq_len, j, "n_positions");
  c.max_seq_len = positions ? *positions : src.integer(F::max_seq_len, j, "n_ctx").value_or(0);
  const std::string act = optional<std::string>(j, "activation_function", "gelu_new", file);
  // All three are the tanh approximation qeval implements; "gelu" (erf) would differ slightly.
  QEVAL_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast",
              "{}: activation_function {} is not supported; expected gelu_new, gelu_pytorch_tanh or gelu_fast "
              "(the tanh approximation)",
              file, in_quotes(act));
  QEVAL_CHECK(optional<bool>(j, "scale_attn_weights", true, file), "{}: scale_attn_weights false is not supported",
              file);
  QEVAL_CHECK(!optional<bool>(j, "scale_attn_by_inverse_layer_idx", false, file),
              "{}: scale_attn_by_inverse_layer_idx true is not supported", file);
  QEVAL_CHECK(!optional<bool>(j, "add_cross_attention", false, file), "{}: add_cross_attention is not supported", file);
  c.norm = NormKind::layernorm;
  c.norm_eps = src.real(F::norm_eps, j, "layer_norm_epsilon").value_or(1e-5);
  c.position = PositionKind::learned;
  c.mlp = MlpKind::gelu;
  c.attention_bias = c.mlp_bias = true;
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", true, file);
  c.fused_qkv = true;
  c.bos_id = token_id(j, "bos_token_id", F::bos_id, src, notes);
  c.eos_id = token_id(j, "eos_token_id", F::eos_id, src, notes);
  notes["activation_function"] = act;
  return c;
}

// What Llama, Qwen2/3, Mistral, Gemma-3 and Phi-3 share: RMSNorm, HF's rotate-half rotary
// (RopePairing::half, nothing permuted), model.layers.* names. `head_dim` is the family's default
// when config.json has none (0: hidden_size / num_attention_heads).
ModelConfig rotary_decoder_config(const json& j, ConfigSource& src, json& notes, std::int64_t head_dim) {
  ModelConfig c;
  c.vocab_size = src.required_integer(F::vocab_size, j, "vocab_size");
  c.d_model = src.required_integer(F::d_model, j, "hidden_size");
  c.d_ff = src.required_integer(F::d_ff, j, "intermediate_size");
  c.n_layers = src.required_integer(F::n_layers, j, "num_hidden_layers");
  c.n_heads = src.required_integer(F::n_heads, j, "num_attention_heads");
  src.name(F::n_kv_heads, "num_key_value_heads");
  c.n_kv_heads = src.integer(F::n_kv_heads, j, "num_key_value_heads").value_or(c.n_heads);
  src.name(F::max_seq_len, "max_position_embeddings");
  c.max_seq_len = src.integer(F::max_seq_len, j, "max_position_embeddings").value_or(0);
  src.name(F::head_size, "head_dim");
  head_dim = src.integer(F::head_size, j, "head_dim").value_or(head_dim);
  // Only a head size that differs from hidden_size / num_attention_heads is a switch.
  if (head_dim > 0 && !(c.d_model % c.n_heads == 0 && head_dim == c.d_model / c.n_heads)) c.head_size = head_dim;
  c.norm = NormKind::rmsnorm;
  src.name(F::norm_eps, "rms_norm_eps");
  c.norm_eps = src.real(F::norm_eps, j, "rms_norm_eps").value_or(1e-6);
  c.position = PositionKind::rope;
  c.rope_pairing = RopePairing::half;
  src.name(F::rope_theta, "rope_theta");
  c.rope_theta = rope_theta(j, src, 10000.0);
  c.mlp = MlpKind::swiglu;
  c.bos_id = token_id(j, "bos_token_id", F::bos_id, src, notes);
  c.eos_id = token_id(j, "eos_token_id", F::eos_id, src, notes);
  notes["max_position_embeddings"] = c.max_seq_len;
  notes["positions"] = "rope: max_position_embeddings is recorded, not a limit on evaluation windows";
  return c;
}

void require_activation(const json& j, const char* key, const char* expected, const std::string& file) {
  const std::string act = optional<std::string>(j, key, expected, file);
  QEVAL_CHECK(act == expected, "{}: {} {} is not supported; expected {}", file, key, in_quotes(act), expected);
}

ModelConfig llama_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  ModelConfig c = rotary_decoder_config(j, src, notes, 0);
  c.architecture = "llama";
  require_activation(j, "hidden_act", "silu", file);
  c.attention_bias = optional<bool>(j, "attention_bias", false, file);
  c.mlp_bias = optional<bool>(j, "mlp_bias", false, file);
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, file);
  return c;
}

// Qwen2/Qwen3: sliding windows only with use_sliding_window, on the layers from max_window_layers on.
void qwen_windows(const json& j, ConfigSource& src, ModelConfig& c) {
  const std::string& file = src.file();
  const std::optional<std::int64_t> window = sliding_window(j, src, 4096);
  const bool use = optional<bool>(j, "use_sliding_window", false, file);
  if (windows_from_layer_types(j, src, c, use ? window : std::nullopt)) return;
  if (!use) return;
  QEVAL_CHECK(window, "{}: use_sliding_window true but \"sliding_window\" is null", file);
  const std::int64_t first = optional<std::int64_t>(j, "max_window_layers", 28, file);
  QEVAL_CHECK(first >= 0, "{}: \"max_window_layers\" is {}: expected an integer >= 0", file, first);
  for (std::int64_t i = 0; i < c.n_layers; ++i) c.attention_windows.push_back(i >= first ? *window : 0);
}

ModelConfig qwen2_config(const json& j, ConfigSource& src, json& notes) {
  ModelConfig c = rotary_decoder_config(j, src, notes, 0);
  c.architecture = "qwen2";
  require_activation(j, "hidden_act", "silu", src.file());
  c.qkv_bias = true;  // Qwen2Attention: q/k/v with biases, o_proj without
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, src.file());
  qwen_windows(j, src, c);
  note_windows(c, notes);
  return c;
}

ModelConfig qwen3_config(const json& j, ConfigSource& src, json& notes) {
  ModelConfig c = rotary_decoder_config(j, src, notes, 128);
  c.architecture = "qwen3";
  require_activation(j, "hidden_act", "silu", src.file());
  c.attention_bias = optional<bool>(j, "attention_bias", false, src.file());
  c.qk_norm = true;
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, src.file());
  qwen_windows(j, src, c);
  note_windows(c, notes);
  return c;
}

ModelConfig mistral_config(const json& j, ConfigSource& src, json& notes) {
  ModelConfig c = rotary_decoder_config(j, src, notes, 0);
  c.architecture = "mistral";
  require_activation(j, "hidden_act", "silu", src.file());
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, src.file());
  const std::optional<std::int64_t> window = sliding_window(j, src, std::nullopt);  // null: no window
  if (!windows_from_layer_types(j, src, c, window)) all_layers_windowed(c, window);
  note_windows(c, notes);
  return c;
}

// Gemma3TextConfig's defaults stand in for absent keys: Gemma3ForConditionalGeneration writes its
// text_config as a difference from them.
ModelConfig gemma3_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  json d = j;
  const std::pair<const char*, json> defaults[] = {
      {"vocab_size", 262208},       {"hidden_size", 2304},         {"intermediate_size", 9216},
      {"num_hidden_layers", 26},    {"num_attention_heads", 8},    {"num_key_value_heads", 4},
      {"max_position_embeddings", 131072}, {"rope_theta", 1000000.0}};
  for (const auto& [key, value] : defaults)
    if (!d.contains(key) || d[key].is_null()) d[key] = value;
  ModelConfig c = rotary_decoder_config(d, src, notes, 256);
  c.architecture = "gemma3";
  const std::string act = optional<std::string>(j, "hidden_activation", optional<std::string>(j, "hidden_act", "gelu_pytorch_tanh", file), file);
  QEVAL_CHECK(act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast",
              "{}: hidden_activation {} is not supported; expected gelu_pytorch_tanh (GeGLU with tanh GELU)", file,
              in_quotes(act));
  c.mlp = MlpKind::geglu;
  c.attention_bias = optional<bool>(j, "attention_bias", false, file);
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", true, file);
  c.qk_norm = true;
  c.sandwich_norms = true;
  c.embedding_scale = std::sqrt(static_cast<double>(c.d_model));
  src.name(F::attention_scale, "query_pre_attn_scalar");
  c.attention_scale = 1.0 / std::sqrt(src.real(F::query_pre_attn_scalar, j, "query_pre_attn_scalar").value_or(256.0));
  c.attn_logit_softcap = src.real(F::attn_logit_softcap, j, "attn_logit_softcapping").value_or(0.0);
  c.final_logit_softcap = src.real(F::final_logit_softcap, j, "final_logit_softcapping").value_or(0.0);
  c.rope_theta = rope_theta(d, src, 1000000.0, "full_attention");
  src.name(F::rope_theta_local, "rope_local_base_freq");
  if (j.contains("rope_parameters")) {
    ConfigSource local(src.file());  // the local base is a rope_theta too, but for the windowed layers
    local.name(F::rope_theta, "rope_parameters.sliding_attention.rope_theta");
    c.rope_theta_local = rope_theta(d, local, 10000.0, "sliding_attention");
  } else {
    c.rope_theta_local = src.real(F::rope_theta_local, j, "rope_local_base_freq").value_or(10000.0);
  }
  const std::optional<std::int64_t> window = sliding_window(j, src, 4096);
  if (!windows_from_layer_types(j, src, c, window)) {
    // Gemma3TextConfig: layer i slides unless (i + 1) is a multiple of the pattern (6: every sixth is global).
    const char* pattern_key = j.contains("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    const std::int64_t pattern = src.integer(F::window_pattern, j, pattern_key).value_or(6);
    for (std::int64_t i = 0; i < c.n_layers; ++i) {
      const bool windowed = (i + 1) % pattern != 0;
      QEVAL_CHECK(!windowed || window, "{}: sliding layers but \"sliding_window\" is null", file);
      c.attention_windows.push_back(windowed ? *window : 0);
    }
  }
  QEVAL_CHECK(!optional<bool>(j, "use_bidirectional_attention", false, file),
              "{}: use_bidirectional_attention true is not supported (qeval evaluates causal LMs)", file);
  note_windows(c, notes);
  notes["norm_gains"] = "Gemma RMSNorm applies (1 + w): the 1 is added to every stored gain on load";
  notes["embedding_scale"] = "sqrt(hidden_size), rounded to the compute dtype as HF Gemma rounds it to the model dtype";
  return c;
}

// rotary_dim from the head size and a declared fraction in (0, 1]; HF: int(head_size * fraction).
void partial_rotary(ModelConfig& c, ConfigSource& src, const json& j, const char* key, double fallback) {
  src.name(F::rotary_dim, key);
  const double fraction = src.real(F::rotary_fraction, j, key).value_or(fallback);
  const auto rd = static_cast<std::int64_t>(static_cast<double>(c.head_dim()) * fraction);
  QEVAL_CHECK(rd >= 2, "{}: {} {} of a head of {} leaves {} rotary channels: expected at least 2", src.file(),
              src.key(F::rotary_fraction), fraction, c.head_dim(), rd);
  if (rd != c.head_dim()) c.rotary_dim = rd;
}

ModelConfig phi3_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  ModelConfig c = rotary_decoder_config(j, src, notes, 0);
  c.architecture = "phi3";
  c.norm_eps = src.real(F::norm_eps, j, "rms_norm_eps").value_or(1e-5);
  require_activation(j, "hidden_act", "silu", file);
  c.fused_qkv = true;      // qkv_proj: rows [q; k; v]
  c.fused_gate_up = true;  // gate_up_proj: rows [gate; up]
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, file);
  QEVAL_CHECK(c.head_size > 0 || c.d_model % c.n_heads == 0, "{}: {} {} is not a multiple of {} {}", file,
              src.key(F::d_model), c.d_model, src.key(F::n_heads), c.n_heads);
  partial_rotary(c, src, j, "partial_rotary_factor", 1.0);
  const std::optional<std::int64_t> window = sliding_window(j, src, std::nullopt);
  if (!windows_from_layer_types(j, src, c, window)) all_layers_windowed(c, window);
  note_windows(c, notes);
  return c;
}

ModelConfig gpt_neox_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  ModelConfig c;
  c.architecture = "gpt_neox";
  c.vocab_size = src.required_integer(F::vocab_size, j, "vocab_size");
  c.d_model = src.required_integer(F::d_model, j, "hidden_size");
  c.d_ff = src.required_integer(F::d_ff, j, "intermediate_size");
  c.n_layers = src.required_integer(F::n_layers, j, "num_hidden_layers");
  c.n_heads = c.n_kv_heads = src.required_integer(F::n_heads, j, "num_attention_heads");
  src.name(F::n_kv_heads, "num_attention_heads");
  src.name(F::max_seq_len, "max_position_embeddings");
  c.max_seq_len = src.integer(F::max_seq_len, j, "max_position_embeddings").value_or(0);
  c.norm = NormKind::layernorm;
  src.name(F::norm_eps, "layer_norm_eps");
  c.norm_eps = src.real(F::norm_eps, j, "layer_norm_eps").value_or(1e-5);
  c.position = PositionKind::rope;
  c.rope_pairing = RopePairing::half;
  src.name(F::rope_theta, "rotary_emb_base");
  const double base = rope_theta(j, src, 10000.0);
  c.rope_theta = src.real(F::rope_theta, j, "rotary_emb_base").value_or(base);
  QEVAL_CHECK(c.d_model % c.n_heads == 0, "{}: {} {} is not a multiple of {} {}", file, src.key(F::d_model), c.d_model,
              src.key(F::n_heads), c.n_heads);
  partial_rotary(c, src, j, j.contains("rotary_pct") ? "rotary_pct" : "partial_rotary_factor", 0.25);
  const std::string act = optional<std::string>(j, "hidden_act", "gelu", file);
  if (act == "gelu")
    c.mlp = MlpKind::gelu_erf;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    c.mlp = MlpKind::gelu;
  else
    fail("{}: hidden_act {} is not supported; expected gelu (erf) or gelu_new / gelu_pytorch_tanh", file, in_quotes(act));
  c.attention_bias = optional<bool>(j, "attention_bias", true, file);
  c.mlp_bias = true;
  c.fused_qkv = true;  // query_key_value, rows regrouped on load from per-head [q k v] to [q; k; v]
  c.parallel_residual = optional<bool>(j, "use_parallel_residual", true, file);
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, file);
  c.bos_id = token_id(j, "bos_token_id", F::bos_id, src, notes);
  c.eos_id = token_id(j, "eos_token_id", F::eos_id, src, notes);
  notes["hidden_act"] = act;
  notes["positions"] = "rope: max_position_embeddings is recorded, not a limit on evaluation windows";
  notes["fused_qkv"] =
      "query_key_value stores rows per head as [q k v]; they are regrouped on load into [q; k; v] (a row "
      "permutation of the one weight tensor, which changes no per-tensor or per-channel quantisation)";
  return c;
}

ModelConfig opt_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  ModelConfig c;
  c.architecture = "opt";
  c.vocab_size = src.required_integer(F::vocab_size, j, "vocab_size");
  c.d_model = src.required_integer(F::d_model, j, "hidden_size");
  c.d_ff = src.required_integer(F::d_ff, j, "ffn_dim");
  c.n_layers = src.required_integer(F::n_layers, j, "num_hidden_layers");
  c.n_heads = c.n_kv_heads = src.required_integer(F::n_heads, j, "num_attention_heads");
  src.name(F::n_kv_heads, "num_attention_heads");
  c.max_seq_len = src.required_integer(F::max_seq_len, j, "max_position_embeddings");
  QEVAL_CHECK(optional<bool>(j, "do_layer_norm_before", true, file),
              "{}: do_layer_norm_before false (post-norm OPT, e.g. opt-350m) is not supported", file);
  QEVAL_CHECK(optional<std::int64_t>(j, "word_embed_proj_dim", c.d_model, file) == c.d_model,
              "{}: word_embed_proj_dim {} differs from hidden_size {} (project_in/project_out) and is not supported",
              file, json_text(j.value("word_embed_proj_dim", json())), c.d_model);
  QEVAL_CHECK(optional<bool>(j, "layer_norm_elementwise_affine", true, file),
              "{}: layer_norm_elementwise_affine false is not supported", file);
  QEVAL_CHECK(!optional<bool>(j, "_remove_final_layer_norm", false, file),
              "{}: _remove_final_layer_norm true is not supported", file);
  const std::string act = optional<std::string>(j, "activation_function", "relu", file);
  QEVAL_CHECK(act == "relu", "{}: activation_function {} is not supported; expected relu", file, in_quotes(act));
  c.norm = NormKind::layernorm;
  c.norm_eps = 1e-5;  // OPT's nn.LayerNorm default
  c.position = PositionKind::learned;
  c.mlp = MlpKind::relu;
  c.attention_bias = c.mlp_bias = optional<bool>(j, "enable_bias", true, file);
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", true, file);
  c.bos_id = token_id(j, "bos_token_id", F::bos_id, src, notes);
  c.eos_id = token_id(j, "eos_token_id", F::eos_id, src, notes);
  notes["positions"] =
      "learned, offset 2: embed_positions has max_position_embeddings + 2 rows and position p reads row p + 2; the "
      "first two rows are dropped on load";
  return c;
}

}  // namespace

const char* hf_supported_architectures() { return kSupportedArchitectures; }

HfModel read_hf_model_config(const json& config_json, const std::string& file, json& notes) {
  QEVAL_CHECK(config_json.is_object(), "{}: expected a JSON object, found {}", file, config_json.type_name());
  const ArchitectureName& arch = pick_architecture(config_json, file);
  HfModel m;
  m.family = arch.family;
  m.architecture = arch.architecture;
  m.format = arch.format;
  const json* j = &config_json;
  if (m.architecture == std::string("Gemma3ForConditionalGeneration")) {
    QEVAL_CHECK(config_json.contains("text_config") && config_json["text_config"].is_object(),
                "{}: Gemma3ForConditionalGeneration without a \"text_config\" object", file);
    j = &config_json["text_config"];
    notes["text_part"] = "Gemma3ForConditionalGeneration: the language model only (vision tower and projector ignored)";
  }
  ConfigSource src(file);
  switch (m.family) {
    case HfFamily::gpt2: m.config = gpt2_config(*j, src, notes); break;
    case HfFamily::llama: m.config = llama_config(*j, src, notes); break;
    case HfFamily::qwen2: m.config = qwen2_config(*j, src, notes); break;
    case HfFamily::qwen3: m.config = qwen3_config(*j, src, notes); break;
    case HfFamily::mistral: m.config = mistral_config(*j, src, notes); break;
    case HfFamily::gemma3: m.config = gemma3_config(*j, src, notes); break;
    case HfFamily::phi3: m.config = phi3_config(*j, src, notes); break;
    case HfFamily::gpt_neox: m.config = gpt_neox_config(*j, src, notes); break;
    case HfFamily::opt: m.config = opt_config(*j, src, notes); break;
  }
  m.norm_plus_one = m.family == HfFamily::gemma3;
  if (m.family == HfFamily::gpt_neox) m.prefix = "gpt_neox.", m.lm_head = "embed_out.weight";
  if (m.family == HfFamily::opt) m.prefix = "model.decoder.";
  m.config.validate(src);
  return m;
}

}  // namespace qeval
