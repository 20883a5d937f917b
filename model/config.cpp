#include "model/config.h"

#include <array>
#include <cmath>
#include <utility>

#include "common/error.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "model/config_validation.h"

namespace qeval {
namespace {

template <typename E, std::size_t N>
std::string enum_name(E v, const std::array<std::pair<E, const char*>, N>& table) {
  for (const auto& [value, name] : table)
    if (value == v) return name;
  return "?";
}

template <typename E, std::size_t N>
E enum_parse(const std::string& s, const std::array<std::pair<E, const char*>, N>& table, const char* what) {
  std::string valid;
  for (const auto& [value, name] : table) {
    if (s == name) return value;
    valid += valid.empty() ? name : std::string(", ") + name;
  }
  fail("unknown {} '{}': expected one of {}", what, s, valid);
}

const std::array<std::pair<NormKind, const char*>, 3> kNorms{
    {{NormKind::layernorm, "layernorm"}, {NormKind::rmsnorm, "rmsnorm"}, {NormKind::rmsnorm_single, "rmsnorm_single"}}};
const std::array<std::pair<PositionKind, const char*>, 3> kPositions{
    {{PositionKind::learned, "learned"}, {PositionKind::rope, "rope"}, {PositionKind::none, "none"}}};
const std::array<std::pair<RopePairing, const char*>, 2> kPairings{
    {{RopePairing::interleaved, "interleaved"}, {RopePairing::half, "half"}}};
const std::array<std::pair<SoftmaxKind, const char*>, 2> kSoftmaxes{
    {{SoftmaxKind::softmax, "softmax"}, {SoftmaxKind::softmax1, "softmax1"}}};
const std::array<std::pair<MlpKind, const char*>, 5> kMlps{{{MlpKind::gelu, "gelu"},
                                                            {MlpKind::swiglu, "swiglu"},
                                                            {MlpKind::geglu, "geglu"},
                                                            {MlpKind::gelu_erf, "gelu_erf"},
                                                            {MlpKind::relu, "relu"}}};

}  // namespace

std::string to_string(NormKind v) { return enum_name(v, kNorms); }
std::string to_string(PositionKind v) { return enum_name(v, kPositions); }
std::string to_string(RopePairing v) { return enum_name(v, kPairings); }
std::string to_string(SoftmaxKind v) { return enum_name(v, kSoftmaxes); }
std::string to_string(MlpKind v) { return enum_name(v, kMlps); }
NormKind parse_norm(const std::string& s) { return enum_parse(s, kNorms, "norm"); }
PositionKind parse_position(const std::string& s) { return enum_parse(s, kPositions, "position"); }
RopePairing parse_rope_pairing(const std::string& s) { return enum_parse(s, kPairings, "rope pairing"); }
SoftmaxKind parse_softmax(const std::string& s) { return enum_parse(s, kSoftmaxes, "attention softmax"); }
MlpKind parse_mlp(const std::string& s) { return enum_parse(s, kMlps, "mlp"); }

double ModelConfig::attention_scale_or_default() const {
  return attention_scale > 0 ? attention_scale : 1.0 / std::sqrt(static_cast<double>(head_dim()));
}

std::int64_t ModelConfig::parameter_count() const {
  const std::int64_t hd = head_dim();
  std::int64_t attn = d_model * hd * (n_heads + 2 * n_kv_heads) + d_model * n_heads * hd;
  std::int64_t mlp_params = (gated_mlp() ? 3 : 2) * d_model * d_ff;
  std::int64_t emb = vocab_size * d_model * (tied_embeddings ? 1 : 2);
  if (position == PositionKind::learned) emb += max_seq_len * d_model;
  return n_layers * (attn + mlp_params) + emb;
}

nlohmann::json config_to_json(const ModelConfig& c) {
  nlohmann::json j = {
      {"format", "qeval"},
      {"architecture", c.architecture},
      {"vocab_size", c.vocab_size},
      {"d_model", c.d_model},
      {"d_ff", c.d_ff},
      {"n_layers", c.n_layers},
      {"n_heads", c.n_heads},
      {"n_kv_heads", c.n_kv_heads},
      {"max_seq_len", c.max_seq_len},
      {"norm", to_string(c.norm)},
      {"norm_eps", c.norm_eps},
      {"position", to_string(c.position)},
      {"rope_pairing", to_string(c.rope_pairing)},
      {"rope_theta", c.rope_theta},
      {"attention_softmax", to_string(c.attention_softmax)},
      {"mlp", to_string(c.mlp)},
      {"attention_bias", c.attention_bias},
      {"mlp_bias", c.mlp_bias},
      {"tied_embeddings", c.tied_embeddings},
      {"fused_qkv", c.fused_qkv},
  };
  // The newer switches are written only when on, so the configs (and records) of the families that
  // existed before them read exactly as they did; an absent switch means its default.
  const ModelConfig defaults;
  if (c.head_size != defaults.head_size) j["head_size"] = c.head_size;
  if (c.rotary_dim != defaults.rotary_dim) j["rotary_dim"] = c.rotary_dim;
  if (c.rope_theta_local != defaults.rope_theta_local) j["rope_theta_local"] = c.rope_theta_local;
  if (!c.attention_windows.empty()) j["attention_windows"] = c.attention_windows;
  if (c.attention_scale != defaults.attention_scale) j["attention_scale"] = c.attention_scale;
  if (c.attn_logit_softcap != defaults.attn_logit_softcap) j["attn_logit_softcap"] = c.attn_logit_softcap;
  if (c.final_logit_softcap != defaults.final_logit_softcap) j["final_logit_softcap"] = c.final_logit_softcap;
  if (c.embedding_scale != defaults.embedding_scale) j["embedding_scale"] = c.embedding_scale;
  for (auto [on, name] : {std::pair{c.qkv_bias, "qkv_bias"}, std::pair{c.qk_norm, "qk_norm"},
                          std::pair{c.sandwich_norms, "sandwich_norms"}, std::pair{c.parallel_residual, "parallel_residual"},
                          std::pair{c.fused_gate_up, "fused_gate_up"}})
    if (on) j[name] = true;
  if (c.bos_id) j["bos_id"] = *c.bos_id;
  if (c.eos_id) j["eos_id"] = *c.eos_id;
  if (c.optimizer) j["optimizer"] = *c.optimizer;
  return j;
}

ModelConfig config_from_json(const nlohmann::json& j, const std::string& source) {
  ModelConfig c;
  ConfigSource src(source);
  using F = ConfigField;
  // An enum switch: a string naming one of the parser's values; refusals name the file and the key.
  auto word = [&](const char* key, const char* fallback, auto parse) {
    QEVAL_CHECK(fallback || (j.contains(key) && !j[key].is_null()), "{}: missing required \"{}\"", source, key);
    if (!j.contains(key) || j[key].is_null()) return parse(fallback);
    QEVAL_CHECK(j[key].is_string(), "{}: \"{}\" is {}: expected a string", source, key, json_text(j[key]));
    try {
      return parse(j[key].get<std::string>());
    } catch (const Error& e) {
      fail("{}: \"{}\": {}", source, key, e.what());
    }
  };
  try {
    QEVAL_CHECK(j.is_object(), "{}: expected a JSON object, found {}", source, j.type_name());
    c.architecture = j.value("architecture", std::string("custom"));
    c.vocab_size = src.required_integer(F::vocab_size, j, "vocab_size");
    c.d_model = src.required_integer(F::d_model, j, "d_model");
    c.d_ff = src.required_integer(F::d_ff, j, "d_ff");
    c.n_layers = src.required_integer(F::n_layers, j, "n_layers");
    c.n_heads = src.required_integer(F::n_heads, j, "n_heads");
    c.n_kv_heads = src.integer(F::n_kv_heads, j, "n_kv_heads").value_or(c.n_heads);
    // config_to_json writes max_seq_len 0 for rope models (no table): 0 here means "not stated".
    if (j.contains("max_seq_len") && !j["max_seq_len"].is_null())
      c.max_seq_len = json_integer(j["max_seq_len"], fmt::format("{}: \"max_seq_len\"", source));
    c.norm = word("norm", nullptr, parse_norm);
    c.norm_eps = src.real(F::norm_eps, j, "norm_eps").value_or(1e-5);
    c.position = word("position", nullptr, parse_position);
    c.rope_pairing = word("rope_pairing", "interleaved", parse_rope_pairing);
    c.rope_theta = src.real(F::rope_theta, j, "rope_theta").value_or(10000.0);
    c.attention_softmax = word("attention_softmax", "softmax", parse_softmax);
    c.mlp = word("mlp", nullptr, parse_mlp);
    c.attention_bias = j.value("attention_bias", false);
    c.mlp_bias = j.value("mlp_bias", false);
    c.tied_embeddings = j.value("tied_embeddings", false);
    c.fused_qkv = j.value("fused_qkv", false);
    // The switches below are written only when on (config_to_json): a value given is never "off".
    c.head_size = src.integer(F::head_size, j, "head_size").value_or(0);
    c.rotary_dim = src.integer(F::rotary_dim, j, "rotary_dim").value_or(0);
    c.rope_theta_local = src.real(F::rope_theta_local, j, "rope_theta_local").value_or(0.0);
    if (j.contains("attention_windows") && !j["attention_windows"].is_null()) {
      QEVAL_CHECK(j["attention_windows"].is_array(), "{}: \"attention_windows\" should be a list of integers", source);
      for (const auto& w : j["attention_windows"])
        c.attention_windows.push_back(src.integer_value(F::attention_windows, "attention_windows", w));
    }
    c.attention_scale = src.real(F::attention_scale, j, "attention_scale").value_or(0.0);
    c.attn_logit_softcap = src.real(F::attn_logit_softcap, j, "attn_logit_softcap").value_or(0.0);
    c.final_logit_softcap = src.real(F::final_logit_softcap, j, "final_logit_softcap").value_or(0.0);
    c.embedding_scale = src.real(F::embedding_scale, j, "embedding_scale").value_or(1.0);
    c.qkv_bias = j.value("qkv_bias", false);
    c.qk_norm = j.value("qk_norm", false);
    c.sandwich_norms = j.value("sandwich_norms", false);
    c.parallel_residual = j.value("parallel_residual", false);
    c.fused_gate_up = j.value("fused_gate_up", false);
    c.bos_id = src.integer(F::bos_id, j, "bos_id");
    c.eos_id = src.integer(F::eos_id, j, "eos_id");
    if (j.contains("optimizer") && j["optimizer"].is_string()) c.optimizer = j["optimizer"].get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid qeval model config: {}", source, e.what());
  }
  c.validate(src);
  return c;
}

}  // namespace qeval
