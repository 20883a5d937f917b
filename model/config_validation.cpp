// The domains of ModelConfig's fields (config_validation.h) and ModelConfig::validate.
#include "model/config_validation.h"

#include <fmt/format.h>

#include <cmath>

#include "common/error.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "model/config.h"

namespace qeval {
namespace {

enum class Domain { positive_integer, non_negative_integer, positive_real, fraction, scaling };

struct FieldRule {
  ConfigField field;
  const char* name;
  Domain domain;
};

// The one table: every field a file may give, with its domain.
constexpr FieldRule kRules[] = {
    {ConfigField::vocab_size, "vocab_size", Domain::positive_integer},
    {ConfigField::d_model, "d_model", Domain::positive_integer},
    {ConfigField::d_ff, "d_ff", Domain::positive_integer},
    {ConfigField::n_layers, "n_layers", Domain::positive_integer},
    {ConfigField::n_heads, "n_heads", Domain::positive_integer},
    {ConfigField::n_kv_heads, "n_kv_heads", Domain::positive_integer},
    {ConfigField::max_seq_len, "max_seq_len", Domain::non_negative_integer},  // 0: not stated (rope)
    {ConfigField::head_size, "head_size", Domain::positive_integer},
    {ConfigField::rotary_dim, "rotary_dim", Domain::positive_integer},
    {ConfigField::rotary_fraction, "rotary_fraction", Domain::fraction},
    {ConfigField::attention_window, "sliding_window", Domain::positive_integer},
    {ConfigField::window_pattern, "sliding_window_pattern", Domain::positive_integer},
    {ConfigField::attention_windows, "attention_windows", Domain::non_negative_integer},
    {ConfigField::norm_eps, "norm_eps", Domain::positive_real},
    {ConfigField::rope_theta, "rope_theta", Domain::positive_real},
    {ConfigField::rope_theta_local, "rope_theta_local", Domain::positive_real},
    {ConfigField::rope_scaling, "rope_scaling", Domain::scaling},
    {ConfigField::attention_scale, "attention_scale", Domain::positive_real},
    {ConfigField::query_pre_attn_scalar, "query_pre_attn_scalar", Domain::positive_real},
    {ConfigField::attn_logit_softcap, "attn_logit_softcap", Domain::positive_real},
    {ConfigField::final_logit_softcap, "final_logit_softcap", Domain::positive_real},
    {ConfigField::embedding_scale, "embedding_scale", Domain::positive_real},
    {ConfigField::bos_id, "bos_id", Domain::non_negative_integer},
    {ConfigField::eos_id, "eos_id", Domain::non_negative_integer},
    {ConfigField::moe_experts, "moe_experts", Domain::positive_integer},
    {ConfigField::moe_top_k, "moe_top_k", Domain::positive_integer},
    {ConfigField::moe_d_ff, "moe_d_ff", Domain::positive_integer},
    {ConfigField::moe_shared_d_ff, "moe_shared_d_ff", Domain::non_negative_integer},
    {ConfigField::ssm_expand, "ssm_expand", Domain::positive_real},
    {ConfigField::ssm_d_inner, "ssm_d_inner", Domain::positive_integer},
    {ConfigField::ssm_d_state, "ssm_d_state", Domain::positive_integer},
    {ConfigField::ssm_d_conv, "ssm_d_conv", Domain::positive_integer},
    {ConfigField::ssm_heads, "ssm_heads", Domain::positive_integer},
    {ConfigField::ssm_head_dim, "ssm_head_dim", Domain::positive_integer},
    {ConfigField::ssm_groups, "ssm_groups", Domain::positive_integer},
    {ConfigField::ssm_chunk, "ssm_chunk", Domain::positive_integer},
    {ConfigField::attn_layer_period, "attn_layer_period", Domain::positive_integer},
    {ConfigField::attn_layer_offset, "attn_layer_offset", Domain::non_negative_integer},
    {ConfigField::expert_layer_period, "expert_layer_period", Domain::positive_integer},
    {ConfigField::expert_layer_offset, "expert_layer_offset", Domain::non_negative_integer},
    {ConfigField::moe_layer_step, "decoder_sparse_step", Domain::positive_integer},
    {ConfigField::ssm_dt_rank, "ssm_dt_rank", Domain::positive_integer},
};

const FieldRule& rule(ConfigField field) {
  for (const auto& r : kRules)
    if (r.field == field) return r;
  fail("config validation: field {} has no rule", static_cast<int>(field));
}

// Sizes and ids fit int32 (as tensors' shapes and token ids do), so no product of two overflows.
constexpr std::int64_t kMaxInteger = INT32_MAX;

const char* expectation(Domain d) {
  switch (d) {
    case Domain::positive_integer: return "an integer in 1..2147483647";
    case Domain::non_negative_integer: return "an integer in 0..2147483647";
    case Domain::positive_real: return "a finite number > 0";
    case Domain::fraction: return "a number in (0, 1]";
    case Domain::scaling: return "null or plain rotary (\"rope_type\": \"default\")";
  }
  return "?";
}

// The rope_scaling types transformers knows; qeval implements none of them beyond "default", but
// naming a known one says "not supported" rather than "unknown".
constexpr const char* kKnownScalings[] = {"linear", "dynamic", "yarn", "longrope", "llama3", "su", "mrope", "proportional"};

}  // namespace

const char* field_name(ConfigField field) { return rule(field).name; }

ConfigSource::ConfigSource(std::string file, std::string key_format)
    : file_(std::move(file)), key_format_(std::move(key_format)) {}

void ConfigSource::remember(ConfigField field, const std::string& key, const nlohmann::json& value) {
  keys_[field] = {key, json_text(value)};
}

void ConfigSource::name(ConfigField field, std::string key) {
  auto& entry = keys_[field];
  entry.first = std::move(key);
}

std::string ConfigSource::key(ConfigField field) const {
  auto it = keys_.find(field);
  const std::string name = it != keys_.end() && !it->second.first.empty() ? it->second.first : field_name(field);
  return fmt::format(fmt::runtime(key_format_), printable(name));
}

std::string ConfigSource::declared(ConfigField field) const {
  auto it = keys_.find(field);
  return it == keys_.end() ? std::string() : it->second.second;
}

std::int64_t ConfigSource::integer_value(ConfigField field, const std::string& key, const nlohmann::json& value) {
  const FieldRule& r = rule(field);
  remember(field, key, value);
  const auto n = json_int64(value);
  QEVAL_CHECK(n.has_value(), "{}: {} is {}: expected {}", file_, this->key(field), declared(field), expectation(r.domain));
  const bool ok = (r.domain == Domain::non_negative_integer ? *n >= 0 : *n >= 1) && *n <= kMaxInteger;
  QEVAL_CHECK(ok, "{}: {} is {}: expected {}", file_, this->key(field), *n, expectation(r.domain));
  return *n;
}

double ConfigSource::real_value(ConfigField field, const std::string& key, const nlohmann::json& value) {
  const FieldRule& r = rule(field);
  remember(field, key, value);
  QEVAL_CHECK(value.is_number(), "{}: {} is {}: expected {}", file_, this->key(field), declared(field),
              expectation(r.domain));
  const double v = value.get<double>();
  const bool ok = std::isfinite(v) && v > 0 && (r.domain != Domain::fraction || v <= 1);
  QEVAL_CHECK(ok, "{}: {} is {}: expected {}", file_, this->key(field), v, expectation(r.domain));
  return v;
}

std::optional<std::int64_t> ConfigSource::integer(ConfigField field, const nlohmann::json& j, const std::string& key) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return std::nullopt;
  return integer_value(field, key, j[key]);
}

std::optional<double> ConfigSource::real(ConfigField field, const nlohmann::json& j, const std::string& key) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return std::nullopt;
  return real_value(field, key, j[key]);
}

std::int64_t ConfigSource::required_integer(ConfigField field, const nlohmann::json& j, const std::string& key) {
  auto v = integer(field, j, key);
  if (!v) {
    name(field, key);
    fail("{}: missing required {} ({})", file_, this->key(field), expectation(rule(field).domain));
  }
  return *v;
}

double ConfigSource::required_real(ConfigField field, const nlohmann::json& j, const std::string& key) {
  auto v = real(field, j, key);
  if (!v) {
    name(field, key);
    fail("{}: missing required {} ({})", file_, this->key(field), expectation(rule(field).domain));
  }
  return *v;
}

void ConfigSource::rope_scaling(const nlohmann::json& value, const std::string& key) {
  remember(ConfigField::rope_scaling, key, value);
  if (value.is_null()) return;
  const std::string where = this->key(ConfigField::rope_scaling);
  // A bare string is the type itself (GGUF's rope.scaling.type).
  const nlohmann::json* type = nullptr;
  if (value.is_string()) {
    type = &value;
  } else {
    QEVAL_CHECK(value.is_object(), "{}: {} is {}: expected {}", file_, where, declared(ConfigField::rope_scaling),
                expectation(Domain::scaling));
    if (value.contains("rope_type")) type = &value["rope_type"];
    else if (value.contains("type")) type = &value["type"];
    // transformers 5's rope_parameters always carries its base; only its type decides.
    QEVAL_CHECK(type != nullptr, "{}: {} is {} without a \"rope_type\" (or \"type\"): which scaling it is cannot be "
                "told; write \"rope_type\": \"default\" or null for plain rotary positions",
                file_, where, declared(ConfigField::rope_scaling));
  }
  QEVAL_CHECK(type->is_string(), "{}: {} has type {}: expected a string", file_, where, json_text(*type));
  const std::string t = type->get<std::string>();
  if (t == "default" || t == "none") return;
  for (const char* known : kKnownScalings)
    QEVAL_CHECK(t != known, "{}: {} type \"{}\" is not supported (qeval implements plain rotary positions only: "
                "\"default\" or null)", file_, where, t);
  fail("{}: {} type {} is unknown; expected \"default\" or null (plain rotary positions)", file_, where, in_quotes(t));
}

void ModelConfig::validate(const std::string& source) const { validate(ConfigSource(source)); }

void ModelConfig::validate(const ConfigSource& src) const {
  const std::string& file = src.file();
  auto key = [&](ConfigField f) { return src.key(f); };
  // Values the loader set without a ConfigSource (training, tests, derived fields) get the same domains.
  for (auto [v, f] : {std::pair{vocab_size, ConfigField::vocab_size}, std::pair{d_model, ConfigField::d_model},
                      std::pair{n_layers, ConfigField::n_layers}})
    QEVAL_CHECK(v > 0, "{}: {} is {}: expected an integer >= 1", file, key(f), v);
  for (auto [v, f] : {std::pair{vocab_size, ConfigField::vocab_size}, std::pair{d_model, ConfigField::d_model},
                      std::pair{d_ff, ConfigField::d_ff}, std::pair{n_layers, ConfigField::n_layers},
                      std::pair{head_size, ConfigField::head_size}, std::pair{max_seq_len, ConfigField::max_seq_len}})
    QEVAL_CHECK(v <= kMaxInteger, "{}: {} is {}: expected an integer in 1..2147483647", file, key(f), v);
  // The layer pattern (mixer and MLP kinds per layer) and the MoE / state-space fields.
  for (auto [size, name] : {std::pair{layer_mixers.size(), "layer_mixers"}, std::pair{layer_ffns.size(), "layer_ffns"}})
    QEVAL_CHECK(size == 0 || static_cast<std::int64_t>(size) == n_layers,
                "{}: {} has {} entries, expected none or one per layer ({} {})", file, name, size,
                key(ConfigField::n_layers), n_layers);
  validate_layer_kinds(src);
  if (has_ffn(FfnKind::dense))
    QEVAL_CHECK(d_ff > 0, "{}: {} is {}: expected an integer >= 1", file, key(ConfigField::d_ff), d_ff);
  if (!has_mixer(MixerKind::attention)) {  // nothing below concerns attention
    QEVAL_CHECK(!fused_qkv && !qk_norm && !parallel_residual && attention_windows.empty() && position != PositionKind::rope,
                "{}: attention switches (fused_qkv, qk_norm, parallel_residual, attention_windows, rope) on a model "
                "without attention layers",
                file);
    QEVAL_CHECK(std::isfinite(norm_eps) && norm_eps > 0, "{}: {} is {}: expected a finite number > 0", file,
                key(ConfigField::norm_eps), norm_eps);
    if (position == PositionKind::learned)
      QEVAL_CHECK(max_seq_len > 0, "{}: {} is {}: learned positions need a positive table length", file,
                  key(ConfigField::max_seq_len), max_seq_len);
    return;
  }
  for (auto [v, f] : {std::pair{n_heads, ConfigField::n_heads}, std::pair{n_kv_heads, ConfigField::n_kv_heads}})
    QEVAL_CHECK(v > 0, "{}: {} is {}: expected an integer >= 1", file, key(f), v);
  // parameter_count() and every weight shape multiply these: refuse sizes whose products leave int64.
  const long double hd = head_size > 0 ? head_size : static_cast<long double>(d_model) / n_heads;
  const long double params = static_cast<long double>(n_layers) * (static_cast<long double>(d_model) * hd * (2 * n_heads + 2 * n_kv_heads) +
                                                                   3.0L * d_model * d_ff) +
                             2.0L * vocab_size * d_model + static_cast<long double>(max_seq_len) * d_model;
  QEVAL_CHECK(params < 0x1p62L, "{}: the sizes imply about {:.3g} parameters ({} {}, {} {}, {} {}, {} {}): not a model",
              file, static_cast<double>(params), key(ConfigField::n_layers), n_layers, key(ConfigField::d_model), d_model,
              key(ConfigField::d_ff), d_ff, key(ConfigField::vocab_size), vocab_size);
  QEVAL_CHECK(n_kv_heads <= n_heads, "{}: {} is {}, more than the {} {} query heads", file, key(ConfigField::n_kv_heads),
              n_kv_heads, key(ConfigField::n_heads), n_heads);
  QEVAL_CHECK(n_heads % n_kv_heads == 0, "{}: {} {} is not a multiple of {} {}", file, key(ConfigField::n_heads), n_heads,
              key(ConfigField::n_kv_heads), n_kv_heads);
  QEVAL_CHECK(head_size >= 0, "{}: {} is {}: expected an integer >= 1", file, key(ConfigField::head_size), head_size);
  if (head_size == 0)
    QEVAL_CHECK(d_model % n_heads == 0, "{}: {} {} is not a multiple of {} {} (and no head size is given)", file,
                key(ConfigField::d_model), d_model, key(ConfigField::n_heads), n_heads);
  QEVAL_CHECK(max_seq_len >= 0, "{}: {} is {}: expected an integer >= 1", file, key(ConfigField::max_seq_len), max_seq_len);
  if (position == PositionKind::learned)
    QEVAL_CHECK(max_seq_len > 0, "{}: {} is {}: learned positions need a positive table length", file,
                key(ConfigField::max_seq_len), max_seq_len);
  QEVAL_CHECK(rotary_dim >= 0 && rotary_dim <= head_dim(), "{}: {} gives {} rotary channels, outside 1..head size {}",
              file, key(ConfigField::rotary_dim), rotary_dim, head_dim());
  if (position == PositionKind::rope) {
    QEVAL_CHECK(rotary_dims() > 0 && rotary_dims() % 2 == 0,
                "{}: {} gives {} rotary channels: rotary positions need an even, positive number", file,
                key(rotary_dim > 0 ? ConfigField::rotary_dim : ConfigField::head_size), rotary_dims());
    QEVAL_CHECK(std::isfinite(rope_theta) && rope_theta > 0, "{}: {} is {}: expected a finite number > 0", file,
                key(ConfigField::rope_theta), rope_theta);
  } else {
    QEVAL_CHECK(rotary_dim == 0 && rope_theta_local == 0, "{}: {} / {} need rope positions", file,
                key(ConfigField::rotary_dim), key(ConfigField::rope_theta_local));
  }
  QEVAL_CHECK(std::isfinite(norm_eps) && norm_eps > 0, "{}: {} is {}: expected a finite number > 0", file,
              key(ConfigField::norm_eps), norm_eps);
  QEVAL_CHECK(attention_windows.empty() || static_cast<std::int64_t>(attention_windows.size()) == n_layers,
              "{}: {} has {} entries, expected none or one per layer ({} {})", file,
              key(ConfigField::attention_windows), attention_windows.size(), key(ConfigField::n_layers), n_layers);
  for (std::int64_t w : attention_windows)
    QEVAL_CHECK(w >= 0, "{}: {} has the window {}: expected 0 (global) or a positive width", file,
                key(ConfigField::attention_windows), w);
  for (auto [v, f] : {std::pair{rope_theta_local, ConfigField::rope_theta_local},
                      std::pair{attention_scale, ConfigField::attention_scale},
                      std::pair{attn_logit_softcap, ConfigField::attn_logit_softcap},
                      std::pair{final_logit_softcap, ConfigField::final_logit_softcap}})
    QEVAL_CHECK(v >= 0 && std::isfinite(v), "{}: {} is {}: expected a finite number > 0", file, key(f), v);
  QEVAL_CHECK(embedding_scale > 0 && std::isfinite(embedding_scale), "{}: {} is {}: expected a finite number > 0", file,
              key(ConfigField::embedding_scale), embedding_scale);
  QEVAL_CHECK(!qk_norm || norm == NormKind::rmsnorm, "{}: qk_norm needs norm rmsnorm (per-head RMSNorm gains), found {}",
              file, to_string(norm));
  QEVAL_CHECK(!(sandwich_norms && parallel_residual), "{}: sandwich_norms and parallel_residual together are not defined",
              file);
  QEVAL_CHECK(!fused_gate_up || gated_mlp(), "{}: fused_gate_up needs a gated MLP (swiglu or geglu), found {}", file,
              to_string(mlp));
  for (auto [id, f] : {std::pair{bos_id, ConfigField::bos_id}, std::pair{eos_id, ConfigField::eos_id}})
    if (id)
      QEVAL_CHECK(*id >= 0 && *id < vocab_size, "{}: {} is {}, outside the vocabulary of {} ({})", file, key(f), *id,
                  vocab_size, key(ConfigField::vocab_size));
}

}  // namespace qeval
