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
    "Phi3ForCausalLM (phi3), GPTNeoXForCausalLM (gpt_neox), OPTForCausalLM (opt), MixtralForCausalLM (mixtral), "
    "Qwen2MoeForCausalLM (qwen2_moe), Qwen3MoeForCausalLM (qwen3_moe), MambaForCausalLM (mamba), Mamba2ForCausalLM "
    "(mamba2), JambaForCausalLM (jamba)";

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
    {HfFamily::mixtral, "MixtralForCausalLM", "mixtral", "hf-mixtral"},
    {HfFamily::qwen2_moe, "Qwen2MoeForCausalLM", "qwen2_moe", "hf-qwen2-moe"},
    {HfFamily::qwen3_moe, "Qwen3MoeForCausalLM", "qwen3_moe", "hf-qwen3-moe"},
    {HfFamily::mamba, "MambaForCausalLM", "mamba", "hf-mamba"},
    {HfFamily::mamba2, "Mamba2ForCausalLM", "mamba2", "hf-mamba2"},
    {HfFamily::jamba, "JambaForCausalLM", "jamba", "hf-jamba"},
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

// A mixture-of-experts or state-space value the family defaults when the file leaves the key out.
// Given, it is read through the config validator (its domain, refusals naming the key); null is
// refused rather than read as "the default" (issue 51: `num_experts_per_tok: null` became 2).
std::int64_t layer_integer(const json& j, ConfigSource& src, ConfigField field, const char* key, std::int64_t fallback) {
  QEVAL_CHECK(!(j.contains(key) && j[key].is_null()), "{}: \"{}\" is null: expected an integer (leave the key out for "
              "the default, {})", src.file(), key, fallback);
  src.name(field, key);
  return src.integer(field, j, key).value_or(fallback);
}

double layer_real(const json& j, ConfigSource& src, ConfigField field, const char* key, double fallback) {
  QEVAL_CHECK(!(j.contains(key) && j[key].is_null()), "{}: \"{}\" is null: expected a number (leave the key out for "
              "the default, {})", src.file(), key, fallback);
  src.name(field, key);
  return src.real(field, j, key).value_or(fallback);
}

// A mixture-of-experts or state-space switch: true or false, null refused (not read as the default).
bool layer_bool(const json& j, const char* key, bool fallback, const std::string& file) {
  QEVAL_CHECK(!(j.contains(key) && j[key].is_null()), "{}: \"{}\" is null: expected true or false (leave the key out for "
              "the default, {})", file, key, fallback);
  return optional<bool>(j, key, fallback, file);
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


// ---- mixture of experts and state spaces (issue 45) ----------------------------------------------

// Mixtral: every layer attention + routed experts (block_sparse_moe), softmax → top-k → renormalised.
ModelConfig mixtral_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  ModelConfig c = rotary_decoder_config(j, src, notes, 0);
  c.architecture = "mixtral";
  require_activation(j, "hidden_act", "silu", file);
  c.rope_theta = rope_theta(j, src, 1000000.0);
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, file);
  const std::optional<std::int64_t> window = sliding_window(j, src, std::nullopt);  // null: no window
  if (!windows_from_layer_types(j, src, c, window)) all_layers_windowed(c, window);
  c.moe_experts = layer_integer(j, src, F::moe_experts, "num_local_experts", 8);
  c.moe_top_k = layer_integer(j, src, F::moe_top_k, "num_experts_per_tok", 2);
  c.moe_router_norm = RouterNorm::topk_renormalized;
  c.layer_ffns.assign(static_cast<std::size_t>(c.n_layers), FfnKind::moe);
  note_windows(c, notes);
  notes["router"] = "softmax over the experts (float32), top num_experts_per_tok, renormalised to sum to 1 (Mixtral)";
  return c;
}

// Qwen2-MoE / Qwen3-MoE: experts on the layers (i + 1) % decoder_sparse_step == 0 not in mlp_only_layers.
void qwen_moe_layers(const json& j, ConfigSource& src, ModelConfig& c, json& notes, bool norm_default) {
  const std::string& file = src.file();
  c.moe_experts = layer_integer(j, src, F::moe_experts, "num_experts", 60);
  c.moe_top_k = layer_integer(j, src, F::moe_top_k, "num_experts_per_tok", 4);
  c.moe_d_ff = layer_integer(j, src, F::moe_d_ff, "moe_intermediate_size", 1408);
  const bool renorm = layer_bool(j, "norm_topk_prob", norm_default, file);
  c.moe_router_norm = renorm ? RouterNorm::topk_renormalized : RouterNorm::topk;
  const std::int64_t step = layer_integer(j, src, F::moe_layer_step, "decoder_sparse_step", 1);
  std::vector<std::int64_t> dense_only;
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    QEVAL_CHECK(j["mlp_only_layers"].is_array(), "{}: \"mlp_only_layers\" should be a list, found {}", file,
                j["mlp_only_layers"].dump());
    for (const auto& v : j["mlp_only_layers"]) {
      dense_only.push_back(json_integer(v, file + ": \"mlp_only_layers\""));
      QEVAL_CHECK(dense_only.back() >= 0 && dense_only.back() < c.n_layers, "{}: \"mlp_only_layers\" names layer {}, but "
                  "the model has layers 0..{}", file, dense_only.back(), c.n_layers - 1);
    }
  }
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    const bool moe = c.moe_experts > 0 && (i + 1) % step == 0 &&
                     std::find(dense_only.begin(), dense_only.end(), i) == dense_only.end();
    c.layer_ffns.push_back(moe ? FfnKind::moe : FfnKind::dense);
  }
  if (std::none_of(c.layer_ffns.begin(), c.layer_ffns.end(), [](FfnKind k) { return k == FfnKind::moe; }))
    c.layer_ffns.clear();
  notes["router"] = renorm ? "softmax over the experts (float32), top num_experts_per_tok, renormalised (norm_topk_prob)"
                           : "softmax over the experts (float32), top num_experts_per_tok, not renormalised";
}

ModelConfig qwen2_moe_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  ModelConfig c = rotary_decoder_config(j, src, notes, 0);
  c.architecture = "qwen2_moe";
  require_activation(j, "hidden_act", "silu", file);
  c.qkv_bias = optional<bool>(j, "qkv_bias", true, file);
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, file);
  qwen_windows(j, src, c);
  qwen_moe_layers(j, src, c, notes, false);
  c.moe_shared_d_ff = layer_integer(j, src, F::moe_shared_d_ff, "shared_expert_intermediate_size", 5632);
  c.moe_shared_gate = c.moe_shared_d_ff > 0;
  note_windows(c, notes);
  return c;
}

ModelConfig qwen3_moe_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  ModelConfig c = rotary_decoder_config(j, src, notes, 128);
  c.architecture = "qwen3_moe";
  require_activation(j, "hidden_act", "silu", file);
  c.attention_bias = optional<bool>(j, "attention_bias", false, file);
  c.qk_norm = true;
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, file);
  qwen_windows(j, src, c);
  qwen_moe_layers(j, src, c, notes, false);
  note_windows(c, notes);
  return c;
}

// "auto" (ceil(hidden_size / 16)) or an integer >= 1; null is refused, not read as "auto" (HF's code
// cannot take it either).
std::int64_t time_step_rank(const json& j, ConfigSource& src, const char* key, std::int64_t hidden) {
  const std::int64_t automatic = (hidden + 15) / 16;
  QEVAL_CHECK(!(j.contains(key) && j[key].is_null()), "{}: \"{}\" is null: expected \"auto\" or an integer (leave the key "
              "out for \"auto\")", src.file(), key);
  if (!j.contains(key) || (j[key].is_string() && j[key] == "auto")) return automatic;
  QEVAL_CHECK(!j[key].is_string(), "{}: \"{}\" is {}: expected \"auto\" or an integer", src.file(), key, json_text(j[key]));
  return layer_integer(j, src, F::ssm_dt_rank, key, automatic);
}


// What Mamba, Mamba-2 and Jamba's Mamba layers share: no positions, RMSNorm, SiLU.
ModelConfig ssm_base_config(const json& j, ConfigSource& src, const char* eps_key, const char* act_key) {
  const std::string& file = src.file();
  ModelConfig c;
  c.vocab_size = src.required_integer(F::vocab_size, j, "vocab_size");
  c.d_model = src.required_integer(F::d_model, j, "hidden_size");
  c.n_layers = src.required_integer(F::n_layers, j, "num_hidden_layers");
  c.norm = NormKind::rmsnorm;
  c.norm_eps = layer_real(j, src, F::norm_eps, eps_key, 1e-5);
  c.position = PositionKind::none;
  c.mlp = MlpKind::swiglu;
  require_activation(j, act_key, "silu", file);
  return c;
}

ModelConfig mamba_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  ModelConfig c = ssm_base_config(j, src, "layer_norm_epsilon", "hidden_act");
  c.architecture = "mamba";
  const double expand = layer_real(j, src, F::ssm_expand, "expand", 2);
  QEVAL_CHECK(expand == std::floor(expand) && expand <= 1024, "{}: \"expand\" is {}: expected an integer in 1..1024 "
              "(Mamba's inner width is expand × hidden_size)", file, expand);
  c.ssm_d_inner = layer_integer(j, src, F::ssm_d_inner, "intermediate_size", static_cast<std::int64_t>(expand) * c.d_model);
  c.ssm_d_state = layer_integer(j, src, F::ssm_d_state, "state_size", 16);
  c.ssm_d_conv = layer_integer(j, src, F::ssm_d_conv, "conv_kernel", 4);
  // HF's Mamba: intermediate_size is expand × hidden_size; a file whose two disagree describes no
  // model HF builds (its in_proj is 2 × expand × hidden_size wide).
  QEVAL_CHECK(c.ssm_d_inner == static_cast<std::int64_t>(expand) * c.d_model, "{}: \"intermediate_size\" is {} but "
              "\"expand\" × \"hidden_size\" is {} × {} = {}: Mamba's inner width is expand × hidden_size", file,
              c.ssm_d_inner, expand, c.d_model, static_cast<std::int64_t>(expand) * c.d_model);
  c.ssm_dt_rank = time_step_rank(j, src, "time_step_rank", c.d_model);
  c.ssm_conv_bias = layer_bool(j, "use_conv_bias", true, file);
  c.ssm_proj_bias = layer_bool(j, "use_bias", false, file);
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", true, file);
  c.layer_mixers.assign(static_cast<std::size_t>(c.n_layers), MixerKind::mamba);
  c.layer_ffns.assign(static_cast<std::size_t>(c.n_layers), FfnKind::none);
  c.bos_id = token_id(j, "bos_token_id", F::bos_id, src, notes);
  c.eos_id = token_id(j, "eos_token_id", F::eos_id, src, notes);
  notes["mixer"] = "Mamba (S6): selective scan with zero-order-hold discretisation; A = -exp(A_log) on load";
  return c;
}

ModelConfig mamba2_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  ModelConfig c = ssm_base_config(j, src, "layer_norm_epsilon", "hidden_act");
  c.architecture = "mamba2";
  const double expand = layer_real(j, src, F::ssm_expand, "expand", 2.0);
  QEVAL_CHECK(expand <= 1024, "{}: \"expand\" is {}: expected a number in (0, 1024]", file, expand);
  c.ssm_d_inner = static_cast<std::int64_t>(expand * static_cast<double>(c.d_model));
  src.name(F::ssm_d_inner, "expand");
  c.ssm_d_state = layer_integer(j, src, F::ssm_d_state, "state_size", 128);
  c.ssm_d_conv = layer_integer(j, src, F::ssm_d_conv, "conv_kernel", 4);
  c.ssm_heads = layer_integer(j, src, F::ssm_heads, "num_heads", 128);
  const std::int64_t head_dim = layer_integer(j, src, F::ssm_head_dim, "head_dim", 64);
  QEVAL_CHECK(c.ssm_heads * head_dim == c.ssm_d_inner,
              "{}: \"num_heads\" {} × \"head_dim\" {} = {} differs from \"expand\" × \"hidden_size\" = {}; not "
              "supported", file, c.ssm_heads, head_dim, c.ssm_heads * head_dim, c.ssm_d_inner);
  c.ssm_groups = layer_integer(j, src, F::ssm_groups, "n_groups", 8);
  c.ssm_chunk = layer_integer(j, src, F::ssm_chunk, "chunk_size", 256);
  c.ssm_conv_bias = layer_bool(j, "use_conv_bias", true, file);
  c.ssm_proj_bias = layer_bool(j, "use_bias", false, file);
  QEVAL_CHECK(layer_bool(j, "rms_norm", true, file), "{}: \"rms_norm\" false is not supported (the gated RMSNorm is "
              "always applied)", file);
  // HF's Mamba2 gates before its RMSNorm (norm_before_gate false); the other order is another model.
  QEVAL_CHECK(!layer_bool(j, "norm_before_gate", false, file), "{}: \"norm_before_gate\" true is not supported (qeval's "
              "Mamba-2 gates, then normalises, as Hugging Face's Mamba2 does)", file);
  if (j.contains("time_step_limit") && !j["time_step_limit"].is_null()) {
    const json& limit = j["time_step_limit"];
    QEVAL_CHECK(limit.is_array() && limit.size() == 2, "{}: \"time_step_limit\" is {}: expected [min, max]", file,
                json_text(limit));
    // The minimum: a finite number >= 0. The maximum: a finite number >= the minimum, or no limit,
    // which HF writes as Python's Infinity (read as the string "Infinity", checkpoint.cpp) or a
    // huge number. NaN, -Infinity and other strings are refused, never read as "no limit".
    QEVAL_CHECK(limit[0].is_number() && std::isfinite(limit[0].get<double>()) && limit[0].get<double>() >= 0,
                "{}: \"time_step_limit\" minimum is {}: expected a finite number >= 0", file, json_text(limit[0]));
    c.ssm_dt_min = limit[0].get<double>();
    const bool unlimited = (limit[1].is_string() && limit[1] == "Infinity") ||
                           (limit[1].is_number() && limit[1].get<double>() >= 1e30);
    QEVAL_CHECK(unlimited || (limit[1].is_number() && std::isfinite(limit[1].get<double>()) &&
                              limit[1].get<double>() >= c.ssm_dt_min),
                "{}: \"time_step_limit\" maximum is {}: expected a finite number >= the minimum {}, or Infinity (no "
                "limit)", file, json_text(limit[1]), c.ssm_dt_min);
    c.ssm_dt_max = unlimited ? 0.0 : limit[1].get<double>();
  }
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, file);
  c.layer_mixers.assign(static_cast<std::size_t>(c.n_layers), MixerKind::mamba2);
  c.layer_ffns.assign(static_cast<std::size_t>(c.n_layers), FfnKind::none);
  c.bos_id = token_id(j, "bos_token_id", F::bos_id, src, notes);
  c.eos_id = token_id(j, "eos_token_id", F::eos_id, src, notes);
  notes["mixer"] = "Mamba-2 (SSD), chunked; gated RMSNorm over the whole d_inner as HF's MambaRMSNormGated computes it";
  return c;
}

ModelConfig jamba_config(const json& j, ConfigSource& src, json& notes) {
  const std::string& file = src.file();
  ModelConfig c = ssm_base_config(j, src, "rms_norm_eps", "hidden_act");
  c.architecture = "jamba";
  c.norm_eps = src.real(F::norm_eps, j, "rms_norm_eps").value_or(1e-6);
  c.d_ff = src.required_integer(F::d_ff, j, "intermediate_size");
  c.n_heads = src.required_integer(F::n_heads, j, "num_attention_heads");
  src.name(F::n_kv_heads, "num_key_value_heads");
  c.n_kv_heads = src.integer(F::n_kv_heads, j, "num_key_value_heads").value_or(c.n_heads);
  src.name(F::max_seq_len, "max_position_embeddings");
  c.max_seq_len = src.integer(F::max_seq_len, j, "max_position_embeddings").value_or(0);
  const std::optional<std::int64_t> window = sliding_window(j, src, std::nullopt);
  QEVAL_CHECK(!window, "{}: sliding_window {} is not supported for Jamba (expected null)", file, *window);
  c.tied_embeddings = optional<bool>(j, "tie_word_embeddings", false, file);
  const std::int64_t experts = layer_integer(j, src, F::moe_experts, "num_experts", 16);
  c.moe_experts = experts;
  c.moe_top_k = layer_integer(j, src, F::moe_top_k, "num_experts_per_tok", 2);
  c.moe_router_norm = RouterNorm::topk;  // JambaSparseMoeBlock: the top-k softmax weights as they are
  const std::int64_t attn_period = layer_integer(j, src, F::attn_layer_period, "attn_layer_period", 8);
  const std::int64_t attn_offset = layer_integer(j, src, F::attn_layer_offset, "attn_layer_offset", 4);
  const std::int64_t expert_period = layer_integer(j, src, F::expert_layer_period, "expert_layer_period", 2);
  const std::int64_t expert_offset = layer_integer(j, src, F::expert_layer_offset, "expert_layer_offset", 1);
  // An offset at or past its period matches no layer: no attention (or no experts) at all.
  QEVAL_CHECK(attn_offset < attn_period, "{}: \"attn_layer_offset\" {} is not below \"attn_layer_period\" {}: no layer "
              "would be attention", file, attn_offset, attn_period);
  QEVAL_CHECK(expert_offset < expert_period, "{}: \"expert_layer_offset\" {} is not below \"expert_layer_period\" {}: no "
              "layer would hold experts", file, expert_offset, expert_period);
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    c.layer_mixers.push_back(i % attn_period == attn_offset ? MixerKind::attention : MixerKind::mamba);
    c.layer_ffns.push_back(experts > 1 && i % expert_period == expert_offset ? FfnKind::moe : FfnKind::dense);
  }
  if (experts <= 1) c.moe_experts = c.moe_top_k = 0;
  const double expand = layer_real(j, src, F::ssm_expand, "mamba_expand", 2);
  QEVAL_CHECK(expand == std::floor(expand) && expand <= 1024, "{}: \"mamba_expand\" is {}: expected an integer in "
              "1..1024", file, expand);
  c.ssm_d_inner = static_cast<std::int64_t>(expand) * c.d_model;
  src.name(F::ssm_d_inner, "mamba_expand");
  c.ssm_d_state = layer_integer(j, src, F::ssm_d_state, "mamba_d_state", 16);
  c.ssm_d_conv = layer_integer(j, src, F::ssm_d_conv, "mamba_d_conv", 4);
  c.ssm_dt_rank = time_step_rank(j, src, "mamba_dt_rank", c.d_model);
  c.ssm_conv_bias = layer_bool(j, "mamba_conv_bias", true, file);
  c.ssm_proj_bias = layer_bool(j, "mamba_proj_bias", false, file);
  c.ssm_bcdt_norm = true;
  c.bos_id = token_id(j, "bos_token_id", F::bos_id, src, notes);
  c.eos_id = token_id(j, "eos_token_id", F::eos_id, src, notes);
  notes["layer_pattern"] = "attention where i % attn_layer_period == attn_layer_offset, else Mamba; experts where "
                           "i % expert_layer_period == expert_layer_offset (num_experts > 1), else the dense MLP";
  notes["positions"] = "none (Jamba's attention layers have no positional encoding)";
  notes["router"] = "softmax over the experts (float32), top num_experts_per_tok, not renormalised (Jamba)";
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
    case HfFamily::mixtral: m.config = mixtral_config(*j, src, notes); break;
    case HfFamily::qwen2_moe: m.config = qwen2_moe_config(*j, src, notes); break;
    case HfFamily::qwen3_moe: m.config = qwen3_moe_config(*j, src, notes); break;
    case HfFamily::mamba: m.config = mamba_config(*j, src, notes); break;
    case HfFamily::mamba2: m.config = mamba2_config(*j, src, notes); break;
    case HfFamily::jamba: m.config = jamba_config(*j, src, notes); break;
  }
  m.norm_plus_one = m.family == HfFamily::gemma3;
  if (m.family == HfFamily::gpt_neox) m.prefix = "gpt_neox.", m.lm_head = "embed_out.weight";
  if (m.family == HfFamily::opt) m.prefix = "model.decoder.";
  if (m.family == HfFamily::mamba || m.family == HfFamily::mamba2) m.prefix = "backbone.";
  m.config.validate(src);
  return m;
}

}  // namespace qeval
