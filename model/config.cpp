#include "model/config.h"

#include <array>
#include <cmath>
#include <utility>

#include "common/error.h"
#include "common/json_integer.h"

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

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](std::int64_t v, const char* name) {
    QEVAL_CHECK(v > 0, "{}: model config field {} must be positive, found {}", source, name, v);
  };
  positive(vocab_size, "vocab_size");
  positive(d_model, "d_model");
  positive(d_ff, "d_ff");
  positive(n_layers, "n_layers");
  positive(n_heads, "n_heads");
  positive(n_kv_heads, "n_kv_heads");
  QEVAL_CHECK(head_size >= 0, "{}: head_size must be 0 (d_model / n_heads) or positive, found {}", source, head_size);
  if (head_size == 0)
    QEVAL_CHECK(d_model % n_heads == 0, "{}: d_model {} is not a multiple of n_heads {} (and no head_size is given)",
                source, d_model, n_heads);
  QEVAL_CHECK(n_heads % n_kv_heads == 0, "{}: n_heads {} is not a multiple of n_kv_heads {}", source, n_heads,
              n_kv_heads);
  if (position == PositionKind::learned) positive(max_seq_len, "max_seq_len (learned positions)");
  QEVAL_CHECK(rotary_dim >= 0 && rotary_dim <= head_dim(), "{}: rotary_dim {} outside 0..head_dim {}", source,
              rotary_dim, head_dim());
  if (position == PositionKind::rope)
    QEVAL_CHECK(rotary_dims() % 2 == 0, "{}: rotary positions need an even number of rotated channels, found {}",
                source, rotary_dims());
  else
    QEVAL_CHECK(rotary_dim == 0 && rope_theta_local == 0, "{}: rotary_dim / rope_theta_local need rope positions",
                source);
  QEVAL_CHECK(norm_eps > 0, "{}: norm_eps must be positive, found {}", source, norm_eps);
  QEVAL_CHECK(attention_windows.empty() || static_cast<std::int64_t>(attention_windows.size()) == n_layers,
              "{}: attention_windows has {} entries, expected none or one per layer ({})", source,
              attention_windows.size(), n_layers);
  for (std::int64_t w : attention_windows)
    QEVAL_CHECK(w >= 0, "{}: attention window {} must be 0 (global) or positive", source, w);
  for (auto [v, name] : {std::pair{rope_theta_local, "rope_theta_local"}, std::pair{attention_scale, "attention_scale"},
                         std::pair{attn_logit_softcap, "attn_logit_softcap"},
                         std::pair{final_logit_softcap, "final_logit_softcap"}})
    QEVAL_CHECK(v >= 0 && std::isfinite(v), "{}: {} must be 0 (off / default) or positive, found {}", source, name, v);
  QEVAL_CHECK(embedding_scale > 0 && std::isfinite(embedding_scale), "{}: embedding_scale must be positive, found {}",
              source, embedding_scale);
  QEVAL_CHECK(!qk_norm || norm == NormKind::rmsnorm, "{}: qk_norm needs norm rmsnorm (per-head RMSNorm gains), found {}",
              source, to_string(norm));
  QEVAL_CHECK(!(sandwich_norms && parallel_residual), "{}: sandwich_norms and parallel_residual together are not defined",
              source);
  QEVAL_CHECK(!fused_gate_up || gated_mlp(), "{}: fused_gate_up needs a gated MLP (swiglu or geglu), found {}", source,
              to_string(mlp));
  for (auto [id, name] : {std::pair{bos_id, "bos_id"}, std::pair{eos_id, "eos_id"}})
    if (id) QEVAL_CHECK(*id >= 0 && *id < vocab_size, "{}: {} {} outside vocabulary of {}", source, name, *id, vocab_size);
}

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
  try {
    QEVAL_CHECK(j.is_object(), "expected a JSON object, found {}", j.type_name());
    // The optional integers are checked here, so that value() and get() below only convert integers.
    for (const char* key : {"n_kv_heads", "max_seq_len", "bos_id", "eos_id", "head_size", "rotary_dim"})
      if (j.contains(key) && !j[key].is_null()) json_integer(j[key], fmt::format("field \"{}\"", key));
    c.architecture = j.value("architecture", std::string("custom"));
    c.vocab_size = json_integer(j.at("vocab_size"), "field \"vocab_size\"");
    c.d_model = json_integer(j.at("d_model"), "field \"d_model\"");
    c.d_ff = json_integer(j.at("d_ff"), "field \"d_ff\"");
    c.n_layers = json_integer(j.at("n_layers"), "field \"n_layers\"");
    c.n_heads = json_integer(j.at("n_heads"), "field \"n_heads\"");
    c.n_kv_heads = j.value("n_kv_heads", c.n_heads);
    c.max_seq_len = j.value("max_seq_len", std::int64_t{0});
    c.norm = parse_norm(j.at("norm").get<std::string>());
    c.norm_eps = j.value("norm_eps", 1e-5);
    c.position = parse_position(j.at("position").get<std::string>());
    c.rope_pairing = parse_rope_pairing(j.value("rope_pairing", std::string("interleaved")));
    c.rope_theta = j.value("rope_theta", 10000.0);
    c.attention_softmax = parse_softmax(j.value("attention_softmax", std::string("softmax")));
    c.mlp = parse_mlp(j.at("mlp").get<std::string>());
    c.attention_bias = j.value("attention_bias", false);
    c.mlp_bias = j.value("mlp_bias", false);
    c.tied_embeddings = j.value("tied_embeddings", false);
    c.fused_qkv = j.value("fused_qkv", false);
    c.head_size = j.value("head_size", std::int64_t{0});
    c.rotary_dim = j.value("rotary_dim", std::int64_t{0});
    c.rope_theta_local = j.value("rope_theta_local", 0.0);
    if (j.contains("attention_windows") && !j["attention_windows"].is_null()) {
      QEVAL_CHECK(j["attention_windows"].is_array(), "field \"attention_windows\" should be a list of integers");
      for (const auto& w : j["attention_windows"])
        c.attention_windows.push_back(json_integer(w, "an entry of field \"attention_windows\""));
    }
    c.attention_scale = j.value("attention_scale", 0.0);
    c.attn_logit_softcap = j.value("attn_logit_softcap", 0.0);
    c.final_logit_softcap = j.value("final_logit_softcap", 0.0);
    c.embedding_scale = j.value("embedding_scale", 1.0);
    c.qkv_bias = j.value("qkv_bias", false);
    c.qk_norm = j.value("qk_norm", false);
    c.sandwich_norms = j.value("sandwich_norms", false);
    c.parallel_residual = j.value("parallel_residual", false);
    c.fused_gate_up = j.value("fused_gate_up", false);
    if (j.contains("bos_id") && !j["bos_id"].is_null()) c.bos_id = j["bos_id"].get<std::int64_t>();
    if (j.contains("eos_id") && !j["eos_id"].is_null()) c.eos_id = j["eos_id"].get<std::int64_t>();
    if (j.contains("optimizer") && j["optimizer"].is_string()) c.optimizer = j["optimizer"].get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid qeval model config: {}", source, e.what());
  } catch (const Error& e) {
    fail("{}: invalid qeval model config: {}", source, e.what());
  }
  c.validate(source);
  return c;
}

}  // namespace qeval
