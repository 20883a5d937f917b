#include "model/config.h"

#include <algorithm>
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

const std::array<std::pair<MixerKind, const char*>, 3> kMixers{
    {{MixerKind::attention, "attention"}, {MixerKind::mamba, "mamba"}, {MixerKind::mamba2, "mamba2"}}};
const std::array<std::pair<FfnKind, const char*>, 3> kFfns{
    {{FfnKind::dense, "dense"}, {FfnKind::moe, "moe"}, {FfnKind::none, "none"}}};
const std::array<std::pair<RouterNorm, const char*>, 2> kRouterNorms{
    {{RouterNorm::topk_renormalized, "softmax_topk_renormalized"}, {RouterNorm::topk, "softmax_topk"}}};

}  // namespace

std::string to_string(MixerKind v) { return enum_name(v, kMixers); }
std::string to_string(FfnKind v) { return enum_name(v, kFfns); }
std::string to_string(RouterNorm v) { return enum_name(v, kRouterNorms); }
MixerKind parse_mixer(const std::string& s) { return enum_parse(s, kMixers, "mixer"); }
FfnKind parse_ffn(const std::string& s) { return enum_parse(s, kFfns, "feed-forward kind"); }
RouterNorm parse_router_norm(const std::string& s) { return enum_parse(s, kRouterNorms, "router normalisation"); }

// Without a pattern every layer has the default kind. Neither walks n_layers: validate() asks
// before the model's size is judged, when a bad header may still say 2^31 layers (a fuzzed
// llama2.c header took over a minute here in the sanitizer build).
bool ModelConfig::has_mixer(MixerKind kind) const {
  if (layer_mixers.empty()) return n_layers > 0 && kind == MixerKind::attention;
  return std::find(layer_mixers.begin(), layer_mixers.end(), kind) != layer_mixers.end();
}

bool ModelConfig::has_ffn(FfnKind kind) const {
  if (layer_ffns.empty()) return n_layers > 0 && kind == FfnKind::dense;
  return std::find(layer_ffns.begin(), layer_ffns.end(), kind) != layer_ffns.end();
}

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

void ModelConfig::validate_layer_kinds(const ConfigSource& src) const {
  const std::string& source = src.file();
  using F = ConfigField;
  auto positive = [&](std::int64_t v, F field, const char* why) {
    QEVAL_CHECK(v > 0, "{}: {} is {}: expected an integer >= 1 for {}", source, src.key(field), v, why);
  };
  const bool moe = has_ffn(FfnKind::moe), mamba = has_mixer(MixerKind::mamba), mamba2 = has_mixer(MixerKind::mamba2);
  if (moe) {
    positive(moe_experts, F::moe_experts, "mixture-of-experts layers");
    QEVAL_CHECK(moe_top_k >= 1 && moe_top_k <= moe_experts, "{}: {} is {}: expected 1..{} (the number of experts, {})",
                source, src.key(F::moe_top_k), moe_top_k, moe_experts, src.key(F::moe_experts));
    QEVAL_CHECK(expert_d_ff() > 0, "{}: the experts' MLP width ({}, else {}) is {}: expected an integer >= 1", source,
                src.key(F::moe_d_ff), src.key(F::d_ff), expert_d_ff());
    QEVAL_CHECK(gated_mlp(), "{}: experts are gated MLPs (swiglu or geglu), found mlp {}", source, to_string(mlp));
    QEVAL_CHECK(moe_shared_d_ff >= 0 && (!moe_shared_gate || moe_shared_d_ff > 0),
                "{}: a shared expert's gate needs a shared expert: {} is {}", source, src.key(F::moe_shared_d_ff),
                moe_shared_d_ff);
    QEVAL_CHECK(!fused_gate_up, "{}: fused_gate_up is not defined for experts", source);
  }
  if (mamba || mamba2) {
    positive(ssm_d_inner, F::ssm_d_inner, "state-space layers");
    positive(ssm_d_state, F::ssm_d_state, "state-space layers");
    positive(ssm_d_conv, F::ssm_d_conv, "state-space layers");
    QEVAL_CHECK(norm == NormKind::rmsnorm, "{}: state-space layers need norm rmsnorm, found {}", source, to_string(norm));
    QEVAL_CHECK(!parallel_residual && !sandwich_norms, "{}: parallel_residual / sandwich_norms with state-space layers",
                source);
  }
  if (mamba)
    QEVAL_CHECK(ssm_dt_rank > 0, "{}: the time-step rank is {}: expected an integer >= 1 for Mamba layers", source,
                ssm_dt_rank);
  if (mamba2) {
    positive(ssm_heads, F::ssm_heads, "Mamba-2 layers");
    positive(ssm_groups, F::ssm_groups, "Mamba-2 layers");
    positive(ssm_chunk, F::ssm_chunk, "Mamba-2 layers");
    QEVAL_CHECK(ssm_norm_groups > 0, "{}: the gated norm's groups are {}: expected an integer >= 1", source,
                ssm_norm_groups);
    QEVAL_CHECK(ssm_d_inner % ssm_heads == 0, "{}: the inner width {} ({}) is not a multiple of {} ({})", source,
                ssm_d_inner, src.key(F::ssm_d_inner), src.key(F::ssm_heads), ssm_heads);
    QEVAL_CHECK(ssm_heads % ssm_groups == 0, "{}: {} ({}) is not a multiple of {} ({})", source, src.key(F::ssm_heads),
                ssm_heads, src.key(F::ssm_groups), ssm_groups);
    QEVAL_CHECK(ssm_d_inner % ssm_norm_groups == 0, "{}: the inner width {} is not a multiple of the norm's {} groups",
                source, ssm_d_inner, ssm_norm_groups);
    QEVAL_CHECK(ssm_dt_min >= 0 && ssm_dt_max >= 0 && (ssm_dt_max == 0 || ssm_dt_max >= ssm_dt_min),
                "{}: time-step limits [{}, {}] are not a range (max 0: none)", source, ssm_dt_min, ssm_dt_max);
  }
}

double ModelConfig::attention_scale_or_default() const {
  return attention_scale > 0 ? attention_scale : 1.0 / std::sqrt(static_cast<double>(head_dim()));
}

std::int64_t ModelConfig::parameter_count() const {
  const std::int64_t D = d_model;
  std::int64_t blocks = 0;
  for (std::int64_t i = 0; i < n_layers; ++i) {
    switch (mixer(i)) {
      case MixerKind::attention: {
        const std::int64_t hd = head_dim();
        blocks += D * hd * (n_heads + 2 * n_kv_heads) + D * n_heads * hd;
        break;
      }
      case MixerKind::mamba:
        blocks += D * 2 * ssm_d_inner + ssm_d_inner * (ssm_dt_rank + 2 * ssm_d_state) + ssm_dt_rank * ssm_d_inner +
                  ssm_d_inner * D + ssm_d_inner * (ssm_d_conv + ssm_d_state + 2);
        break;
      case MixerKind::mamba2: {
        const std::int64_t conv = ssm_conv_dim(MixerKind::mamba2);
        blocks += D * (ssm_d_inner + conv + ssm_heads) + ssm_d_inner * D + conv * ssm_d_conv + ssm_d_inner + 3 * ssm_heads;
        break;
      }
    }
    switch (ffn(i)) {
      case FfnKind::dense: blocks += (gated_mlp() ? 3 : 2) * D * d_ff; break;
      case FfnKind::moe: blocks += moe_experts * (3 * D * expert_d_ff() + D) + 3 * D * moe_shared_d_ff; break;
      case FfnKind::none: break;
    }
  }
  std::int64_t emb = vocab_size * D * (tied_embeddings ? 1 : 2);
  if (position == PositionKind::learned) emb += max_seq_len * D;
  return blocks + emb;
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
  if (!c.layer_mixers.empty()) {
    std::vector<std::string> names;
    for (MixerKind k : c.layer_mixers) names.push_back(to_string(k));
    j["layer_mixers"] = names;
  }
  if (!c.layer_ffns.empty()) {
    std::vector<std::string> names;
    for (FfnKind k : c.layer_ffns) names.push_back(to_string(k));
    j["layer_ffns"] = names;
  }
  if (c.has_ffn(FfnKind::moe)) {
    j["moe_experts"] = c.moe_experts;
    j["moe_top_k"] = c.moe_top_k;
    j["moe_d_ff"] = c.expert_d_ff();
    j["moe_router_norm"] = to_string(c.moe_router_norm);
    if (c.moe_shared_d_ff > 0) j["moe_shared_d_ff"] = c.moe_shared_d_ff;
    if (c.moe_shared_gate) j["moe_shared_gate"] = true;
  }
  const bool mamba = c.has_mixer(MixerKind::mamba), mamba2 = c.has_mixer(MixerKind::mamba2);
  if (mamba || mamba2) {
    j["ssm_d_inner"] = c.ssm_d_inner;
    j["ssm_d_state"] = c.ssm_d_state;
    j["ssm_d_conv"] = c.ssm_d_conv;
    j["ssm_conv_bias"] = c.ssm_conv_bias;
    j["ssm_proj_bias"] = c.ssm_proj_bias;
  }
  if (mamba) {
    j["ssm_dt_rank"] = c.ssm_dt_rank;
    if (c.ssm_bcdt_norm) j["ssm_bcdt_norm"] = true;
  }
  if (mamba2) {
    j["ssm_heads"] = c.ssm_heads;
    j["ssm_groups"] = c.ssm_groups;
    j["ssm_chunk"] = c.ssm_chunk;
    j["ssm_norm_groups"] = c.ssm_norm_groups;
    j["ssm_dt_min"] = c.ssm_dt_min;
    j["ssm_dt_max"] = c.ssm_dt_max;
  }
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
    c.d_ff = src.integer(F::d_ff, j, "d_ff").value_or(0);  // none: no dense MLP (state-space models)
    c.n_layers = src.required_integer(F::n_layers, j, "n_layers");
    c.n_heads = src.integer(F::n_heads, j, "n_heads").value_or(0);  // none: no attention layer (Mamba)
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
    if (j.contains("layer_mixers"))
      for (const auto& k : j.at("layer_mixers")) c.layer_mixers.push_back(parse_mixer(k.get<std::string>()));
    if (j.contains("layer_ffns"))
      for (const auto& k : j.at("layer_ffns")) c.layer_ffns.push_back(parse_ffn(k.get<std::string>()));
    auto integer = [&](const char* key, std::int64_t fallback) {
      return j.contains(key) ? json_integer(j.at(key), fmt::format("field \"{}\"", key)) : fallback;
    };
    c.moe_experts = integer("moe_experts", 0);
    c.moe_top_k = integer("moe_top_k", 0);
    c.moe_d_ff = integer("moe_d_ff", 0);
    c.moe_router_norm = parse_router_norm(j.value("moe_router_norm", std::string("softmax_topk_renormalized")));
    c.moe_shared_d_ff = integer("moe_shared_d_ff", 0);
    c.moe_shared_gate = j.value("moe_shared_gate", false);
    c.ssm_d_inner = integer("ssm_d_inner", 0);
    c.ssm_d_state = integer("ssm_d_state", 0);
    c.ssm_d_conv = integer("ssm_d_conv", 0);
    c.ssm_dt_rank = integer("ssm_dt_rank", 0);
    c.ssm_conv_bias = j.value("ssm_conv_bias", true);
    c.ssm_proj_bias = j.value("ssm_proj_bias", false);
    c.ssm_bcdt_norm = j.value("ssm_bcdt_norm", false);
    c.ssm_heads = integer("ssm_heads", 0);
    c.ssm_groups = integer("ssm_groups", 1);
    c.ssm_chunk = integer("ssm_chunk", 256);
    c.ssm_norm_groups = integer("ssm_norm_groups", 1);
    c.ssm_dt_min = j.value("ssm_dt_min", 0.0);
    c.ssm_dt_max = j.value("ssm_dt_max", 0.0);
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
