#include "quant/rewrite.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <set>

#include "common/error.h"
#include "common/printable.h"
#include "kernels/int8_gemm.h"
#include "kernels/w4_gemm.h"
#include "quant/calibrated_weights.h"
#include "quant/formats/ggml/quants.h"
#include "quant/ggml_importance.h"
#include "quant/schemes/scheme_json.h"

namespace qeval {
namespace {

void check_patterns_match(const std::vector<std::string>& names, const SchemeSpec& spec) {
  for (const auto* list : {&spec.include, &spec.exclude}) {
    for (const auto& pattern : *list) {
      bool any = false;
      for (const auto& n : names) any = any || glob_match(pattern, n);
      QEVAL_CHECK(any, "scheme {}: {} pattern '{}' matches no linear of this model; its linears are: {}", spec.name,
                  list == &spec.include ? "include" : "exclude", pattern, fmt::join(names, ", "));
    }
  }
}

nlohmann::json kernel_backends(const SchemeSpec& spec) {
  if (spec.weights.kind == QuantKind::int8_absmax)
    return {{"int8_gemm", kernels::to_string(kernels::int8_gemm_cpu_backend())},
            {"activation_quantization", "kernels/int8_quantize (fused)"}};
  if (spec.weights.kind == QuantKind::int4_zeropoint)
    return {{"w4_gemm", fmt::format("vectorized ({}) for small row counts, dequantise + fp32 GEMM for large",
                                    kernels::w4_gemm_variant())}};
  if (spec.weights.is_float_format() || spec.input_activations.is_float_format())
    return {{"element_rounding", "quant/formats/minifloat.h, one branch-free loop dispatched by CPUID (AVX-512, AVX2, baseline)"},
            {"gemm", "dequantised weight (once per layer) + fp32 GEMM"}};
  return nlohmann::json::object();
}

std::int64_t fp32_bytes_of(const FloatLinear& fl) {
  return (fl.weight().numel() + (fl.bias().defined() ? fl.bias().numel() : 0)) * 4;
}

// One quantised linear's log, for the reports.
struct LayerLog {
  std::string name;
  std::int64_t in_features = 0;
  const QuantizedLinearLog* log = nullptr;
};

nlohmann::json pairs(const std::map<std::int64_t, std::int64_t>& counts) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, n] : counts) out.push_back({key, n});
  return out;
}

nlohmann::json kept_report(const std::vector<LayerLog>& layers_in, const KeepTokens& keep) {
  nlohmann::json layers = nlohmann::json::array();
  std::map<std::int64_t, std::int64_t> total;
  std::int64_t sequences = -1;
  for (const LayerLog& l : layers_in) {
    std::lock_guard<std::mutex> lock(l.log->mutex);
    const QuantizedLinear::KeptPositions& kept = l.log->kept;
    if (sequences < 0) sequences = kept.sequences;
    for (const auto& [position, n] : kept.counts) total[position] += n;
    layers.push_back({{"name", l.name}, {"sequences", kept.sequences}, {"positions", pairs(kept.counts)}});
  }
  if (sequences < 0) return nullptr;
  return {{"rule", to_string(keep.rule)},
          {"count", keep.count},
          {"sequences", sequences},
          {"positions", pairs(total)},
          {"layers", std::move(layers)}};
}

nlohmann::json outlier_report(const std::vector<LayerLog>& layers_in, double threshold) {
  nlohmann::json layers = nlohmann::json::array();
  std::int64_t sequences = -1;
  double sum_of_means = 0;
  for (const LayerLog& l : layers_in) {
    std::lock_guard<std::mutex> lock(l.log->mutex);
    const QuantizedLinear::OutlierFeatures& log = l.log->outliers;
    if (sequences < 0) sequences = log.sequences;
    const double mean = log.sequences > 0 ? static_cast<double>(log.total) / static_cast<double>(log.sequences) : 0.0;
    sum_of_means += mean;
    layers.push_back({{"name", l.name},
                      {"in_features", l.in_features},
                      {"sequences", log.sequences},
                      {"mean_outlier_features", mean},
                      {"max_outlier_features", log.max},
                      {"features", pairs(log.counts)}});
  }
  if (sequences < 0) return nullptr;
  const double mean = sum_of_means / static_cast<double>(layers.size());
  return {{"threshold", outlier_threshold_for_json(threshold)},
          {"sequences", sequences},
          {"layers", std::move(layers)},
          {"mean_outlier_features", mean}};
}

nlohmann::json engines_report(const std::vector<LayerLog>& layers) {
  std::set<std::string> engines;
  for (const LayerLog& l : layers) {
    std::lock_guard<std::mutex> lock(l.log->mutex);
    engines.insert(l.log->engines_used.begin(), l.log->engines_used.end());
  }
  return engines.empty() ? nlohmann::json(nullptr) : nlohmann::json(engines);
}

std::vector<std::string> linear_names(const Transformer& model) {
  std::vector<std::string> names;
  for (const auto& l : model.linears()) names.push_back(l.name);
  return names;
}

}  // namespace

SchemeRewrite::SchemeRewrite(SchemeSpec spec, std::vector<std::string> linear_names)
    : spec_(std::move(spec)), names_(std::move(linear_names)) {
  validate_scheme(spec_, "scheme " + spec_.name);
  check_patterns_match(names_, spec_);
  why_not_kernel_ = kernel_path_unavailable_reason(spec_);
  if (spec_.kv_cache.enabled()) kv_cache_ = std::make_shared<QuantizedKvCache>(spec_.kv_cache);
  if (!spec_.quantizes_anything()) {
    path_text_ = "none (full precision)";
  } else if (!spec_.quantizes_linears()) {
    path_text_ = "kv cache only (every linear in full precision)";
  } else if (spec_.execution == ExecutionPreference::reference) {
    path_text_ = "reference";
  } else if (why_not_kernel_.empty()) {
    path_ = ExecutionPath::kernel;
    path_text_ = "kernel";
  } else {
    QEVAL_CHECK(spec_.execution != ExecutionPreference::kernel,
                "scheme {} asks for the kernel path, which it cannot run: {}", spec_.name, why_not_kernel_);
    path_text_ = "reference (" + why_not_kernel_ + ")";
  }
}

std::shared_ptr<const Linear> SchemeRewrite::rewrite_linear(const std::string& name,
                                                            const std::shared_ptr<const Linear>& full) {
  const auto* fl = dynamic_cast<const FloatLinear*>(full.get());
  QEVAL_CHECK(fl != nullptr, "quantize_model: linear {} is not a float linear ({}); quantise a full-precision model", name,
              full->describe());
  nlohmann::json layer = {{"name", name},
                          {"in_features", fl->in_features()},
                          {"out_features", fl->out_features()},
                          {"fp32_weight_bytes", fp32_bytes_of(*fl)}};
  std::shared_ptr<const Linear> out = full;
  // Kind ggml: this tensor's llama.cpp type (F32: left in full precision, as a --tensor-type f32).
  std::optional<GgmlTensorChoice> ggml;
  if (spec_.selects(name) && spec_.weights.kind == QuantKind::ggml) {
    QEVAL_CHECK(ggml_plan_.has_value(), "scheme {}: kind ggml needs the model's config before linear {} "
                "(SchemeRewrite::use_model)", spec_.name, name);
    ggml = ggml_plan_->choose(name, fl->in_features());
    layer["ggml_type"] = ggml_type_label(ggml->type);
    layer["ggml_rule"] = ggml->rule;
    // Whether this tensor was quantised with an importance matrix entry (Q8_0/MXFP4 never read one).
    if (spec_.ggml_importance)
      layer["ggml_imatrix"] = spec_.ggml_importance->find(name).defined() && ggml->type != GgmlType::F16 &&
                              ggml_type_uses_importance(ggml->type);
  }
  if (spec_.selects(name) && !(ggml && ggml->type == GgmlType::F32)) {
    Logged& logged = logs_[name];
    if (!logged.log) logged = {QuantizedLinear::make_log(), fl->in_features()};
    SchemeSpec tensor_spec;  // kind ggml: the scheme with this tensor's type resolved
    if (ggml) {
      tensor_spec = spec_;
      tensor_spec.weights.ggml_type = ggml_type_label(ggml->type);
      tensor_spec.weights.ggml_file_type.clear();
    }
    auto q = std::make_shared<QuantizedLinear>(name, fl->weight(), fl->bias(), ggml ? tensor_spec : spec_, path_,
                                               logged.log, fl->weight_max_abs());
    layer["quantized"] = true;
    layer["describe"] = q->describe();
    layer["weight_bytes"] = q->weight_bytes();
    out = std::move(q);
  } else {
    layer["quantized"] = false;
    layer["describe"] = fl->describe();
    layer["weight_bytes"] = fl->weight_bytes();
  }
  layers_[name] = std::move(layer);
  return out;
}

bool SchemeRewrite::selects_in_layer(const ModelConfig& config, std::int64_t layer) const {
  if (kv_cache_ && config.mixer(layer) == MixerKind::attention) return true;
  for (const std::string& name : block_linear_names(config, layer))
    if (spec_.selects(name)) return true;
  if (spec_.calibrated_weights) {  // tensors its calibration replaced there (AWQ's fold)
    const std::string prefix = fmt::format("layers.{}.", layer);
    const auto it = spec_.calibrated_weights->replaced_tensors.lower_bound(prefix);
    if (it != spec_.calibrated_weights->replaced_tensors.end() && it->first.compare(0, prefix.size(), prefix) == 0)
      return true;
  }
  return false;
}

void SchemeRewrite::check_model(const ModelConfig& config, const std::string& model) const {
  check_kv_cache_fits(spec_.kv_cache, config, model, spec_.name);
}

namespace {

// The block with the tensors a calibration replaced in its layer (AWQ's folded norms), else itself.
Block with_calibrated_tensors(const Block& full, const SchemeSpec& spec) {
  if (!spec.calibrated_weights || spec.calibrated_weights->replaced_tensors.empty()) return full;
  const std::string prefix = fmt::format("layers.{}.", full.layer());
  std::map<std::string, at::Tensor> mine;
  const auto& all = spec.calibrated_weights->replaced_tensors;
  for (auto it = all.lower_bound(prefix); it != all.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
    mine.insert(*it);
  return mine.empty() ? full : full.with_tensors(mine);
}

}  // namespace

Block SchemeRewrite::rewrite(const Block& full_block) {
  const Block full = with_calibrated_tensors(full_block, spec_);
  Block out = full;
  if (kv_cache_ && full.config().mixer(full.layer()) == MixerKind::attention) {
    check_kv_cache_fits(spec_.kv_cache, full.config(), "of this block", spec_.name);
    out.set_kv_cache(kv_cache_);
  }
  for (const auto& named : full.linears()) {
    if (!ggml_plan_ && spec_.weights.kind == QuantKind::ggml) use_model(full.config());
    std::shared_ptr<const Linear> replaced = rewrite_linear(named.name, named.linear);
    if (replaced != named.linear) out.replace_linear(named.name, std::move(replaced));
  }
  return out;
}

std::shared_ptr<const Linear> SchemeRewrite::rewrite_head(const std::shared_ptr<const Linear>& full_head) {
  return rewrite_linear("lm_head", full_head);
}

std::vector<std::string> SchemeRewrite::quantized_linears(const ModelConfig& config) const {
  std::vector<std::string> out;
  for (const std::string& name : names_) {
    if (!spec_.selects(name)) continue;
    if (spec_.weights.kind == QuantKind::ggml) {
      QEVAL_CHECK(ggml_plan_.has_value(), "scheme {}: kind ggml needs the model's config (SchemeRewrite::use_model)",
                  spec_.name);
      if (ggml_plan_->choose(name, linear_shape(config, name).in).type == GgmlType::F32) continue;
    }
    out.push_back(name);
  }
  return out;
}

void SchemeRewrite::use_model(const ModelConfig& config) {
  if (ggml_plan_ || spec_.weights.kind != QuantKind::ggml) return;
  ggml_plan_.emplace(spec_, names_, config);
  vocab_size_ = config.vocab_size;
  d_model_ = config.d_model;
  if (selects_embedding(spec_)) embedding_ = ggml_plan_->choose("token_embedding", config.d_model);
}

at::Tensor SchemeRewrite::rewrite_embedding_rows(const at::Tensor& rows) {
  QEVAL_CHECK(embedding_.has_value(), "scheme {}: the token embedding is not quantised under this scheme, or "
              "use_model was not called", spec_.name);
  QEVAL_CHECK(rows.dim() == 2 && rows.size(1) == d_model_, "scheme {}: embedding rows must be [n, {}], got {}",
              spec_.name, d_model_, rows.sizes());
  if (rows.size(0) == 0) return rows;
  // llama-quantize looks token_embd.weight up in the importance matrix too (llama-imatrix never
  // collects it, so only a file made otherwise has it).
  const at::Tensor importance = spec_.ggml_importance ? spec_.ggml_importance->find("token_embedding") : at::Tensor();
  if (importance.defined() && embedding_->type != GgmlType::F16 && embedding_->type != GgmlType::F32)
    return quantize_dequantize_ggml(rows.to(at::kFloat).contiguous(), embedding_->type, importance);
  return ggml_round_trip(rows.to(at::kFloat).contiguous(), embedding_->type);
}

nlohmann::json SchemeRewrite::report() const {
  nlohmann::json layers = nlohmann::json::array();
  std::int64_t quantized = 0, q_bytes = 0, fp32_bytes = 0, model_bytes = 0, model_fp32 = 0;
  if (embedding_) {  // first in execution order; a table, not a linear: outside the byte totals
    const std::string type = ggml_type_label(embedding_->type);
    layers.push_back({{"name", "token_embedding"},
                      {"in_features", d_model_},
                      {"out_features", vocab_size_},
                      {"fp32_weight_bytes", vocab_size_ * d_model_ * 4},
                      {"quantized", embedding_->type != GgmlType::F32},
                      {"describe", fmt::format("token embedding, ggml-{} (each row looked up is the row of the table's "
                                               "round trip)", type)},
                      {"weight_bytes", ggml_tensor_bytes(embedding_->type, vocab_size_, d_model_)},
                      {"ggml_type", type},
                      {"ggml_rule", embedding_->rule}});
  }
  for (const auto& name : names_) {
    auto it = layers_.find(name);
    if (it == layers_.end()) continue;
    const nlohmann::json& layer = it->second;
    model_bytes += layer.at("weight_bytes").get<std::int64_t>();
    model_fp32 += layer.at("fp32_weight_bytes").get<std::int64_t>();
    if (layer.at("quantized").get<bool>()) {
      ++quantized;
      q_bytes += layer.at("weight_bytes").get<std::int64_t>();
      fp32_bytes += layer.at("fp32_weight_bytes").get<std::int64_t>();
    }
    layers.push_back(layer);
    // Experts see only the tokens routed to them: the record says how many (over every window).
    if (name.find(".moe.") != std::string::npos)
      if (auto log = logs_.find(name); log != logs_.end()) {
        std::lock_guard<std::mutex> lock(log->second.log->mutex);
        layers.back()["tokens"] = log->second.log->rows;
      }
  }
  nlohmann::json out = {{"scheme", scheme_to_json(spec_)},
          {"execution_path", path_text_},
          {"kernel_path_available", why_not_kernel_.empty()},
          {"kernel_path_unavailable_reason", why_not_kernel_},
          {"kernels", path_ == ExecutionPath::kernel ? kernel_backends(spec_) : nlohmann::json::object()},
          {"layers", std::move(layers)},
          {"quantized_layers", quantized},
          {"quantized_weight_bytes", q_bytes},
          {"fp32_weight_bytes", fp32_bytes},
          {"weight_bytes_ratio", fp32_bytes > 0 ? static_cast<double>(q_bytes) / fp32_bytes : 1.0},
          {"model_linear_bytes", model_bytes},
          {"model_linear_bytes_fp32", model_fp32}};
  if (kv_cache_) out["kv_cache_error"] = kv_cache_->error_report();
  return out;
}

namespace {
std::vector<LayerLog> logs_in_order(const std::vector<std::string>& names,
                                    const std::map<std::string, std::shared_ptr<QuantizedLinearLog>>& logs,
                                    const std::map<std::string, std::int64_t>& in_features) {
  std::vector<LayerLog> out;
  for (const auto& name : names)
    if (auto it = logs.find(name); it != logs.end()) out.push_back({name, in_features.at(name), it->second.get()});
  return out;
}
}  // namespace

namespace {

std::map<std::int64_t, std::int64_t> position_counts(const nlohmann::json& list) {
  std::map<std::int64_t, std::int64_t> counts;
  for (const auto& pair : list) counts[pair[0].get<std::int64_t>()] += pair[1].get<std::int64_t>();
  return counts;
}

}  // namespace

nlohmann::json add_kept_positions(const nlohmann::json& a, const nlohmann::json& b, const std::string& source) {
  if (a.is_null()) return b;
  if (b.is_null()) return a;
  QEVAL_CHECK(a.at("rule") == b.at("rule") && a.at("count") == b.at("count") && a.at("layers").size() == b.at("layers").size(),
              "{}: kept positions of rule {} {} over {} layers cannot be added to those of rule {} {} over {} layers",
              source, json_text(b.at("rule")), json_text(b.at("count")), b.at("layers").size(), json_text(a.at("rule")),
              json_text(a.at("count")), a.at("layers").size());
  auto add = [](const nlohmann::json& x, const nlohmann::json& y) {
    std::map<std::int64_t, std::int64_t> counts = position_counts(x);
    for (const auto& [position, n] : position_counts(y)) counts[position] += n;
    return pairs(counts);
  };
  nlohmann::json out = a;
  out["sequences"] = a.at("sequences").get<std::int64_t>() + b.at("sequences").get<std::int64_t>();
  out["positions"] = add(a.at("positions"), b.at("positions"));
  for (std::size_t l = 0; l < a.at("layers").size(); ++l) {
    const nlohmann::json &x = a["layers"][l], &y = b["layers"][l];
    QEVAL_CHECK(x.at("name") == y.at("name"), "{}: kept positions of layer {} cannot be added to those of layer {}",
                source, json_text(y.at("name")), json_text(x.at("name")));
    nlohmann::json& into = out["layers"][l];
    into["sequences"] = x.at("sequences").get<std::int64_t>() + y.at("sequences").get<std::int64_t>();
    into["positions"] = add(x.at("positions"), y.at("positions"));
  }
  return out;
}

nlohmann::json SchemeRewrite::kept_positions_report() const {
  if (!spec_.keep_tokens.enabled()) return nullptr;
  std::map<std::string, std::shared_ptr<QuantizedLinearLog>> logs;
  std::map<std::string, std::int64_t> in;
  for (const auto& [name, l] : logs_) logs[name] = l.log, in[name] = l.in_features;
  return kept_report(logs_in_order(names_, logs, in), spec_.keep_tokens);
}

nlohmann::json SchemeRewrite::outlier_features_report() const {
  if (!spec_.outlier_threshold) return nullptr;
  std::map<std::string, std::shared_ptr<QuantizedLinearLog>> logs;
  std::map<std::string, std::int64_t> in;
  for (const auto& [name, l] : logs_) logs[name] = l.log, in[name] = l.in_features;
  return outlier_report(logs_in_order(names_, logs, in), *spec_.outlier_threshold);
}

nlohmann::json SchemeRewrite::engines_used_report() const {
  std::vector<LayerLog> layers;
  for (const auto& name : names_)
    if (auto it = logs_.find(name); it != logs_.end()) layers.push_back({name, it->second.in_features, it->second.log.get()});
  return engines_report(layers);
}

QuantizedModel quantize_model(const Transformer& full, const SchemeSpec& spec) {
  SchemeRewrite rewrite(spec, linear_names(full));
  rewrite.check_model(full.config(), "'" + full.config().architecture + "'");
  QuantizedModel out{full, nlohmann::json::object()};
  out.model.set_kv_cache(rewrite.kv_cache());
  // Whole blocks: their linears and any tensor the scheme's calibration replaced (AWQ's folded norms).
  for (const Block& block : full.blocks()) out.model.replace_block(rewrite.rewrite(block));
  out.model.replace_linear("lm_head", rewrite.rewrite_head(full.lm_head()));
  out.report = rewrite.report();
  return out;
}

namespace {
std::vector<LayerLog> quantized_layers(const Transformer& model, bool (*wanted)(const QuantizedLinear&)) {
  std::vector<LayerLog> out;
  for (const auto& named : model.linears())
    if (const auto* q = dynamic_cast<const QuantizedLinear*>(named.linear.get()); q != nullptr && wanted(*q))
      out.push_back({named.name, q->in_features(), &q->log()});
  return out;
}
const QuantizedLinear* first_quantized(const Transformer& model, bool (*wanted)(const QuantizedLinear&)) {
  for (const auto& named : model.linears())
    if (const auto* q = dynamic_cast<const QuantizedLinear*>(named.linear.get()); q != nullptr && wanted(*q)) return q;
  return nullptr;
}
bool keeps_tokens(const QuantizedLinear& q) { return q.keep_tokens().enabled(); }
bool decomposes_outliers(const QuantizedLinear& q) { return q.outlier_threshold().has_value(); }
bool any_layer(const QuantizedLinear&) { return true; }
}  // namespace

nlohmann::json kept_positions_report(const Transformer& model) {
  const QuantizedLinear* first = first_quantized(model, keeps_tokens);
  return first ? kept_report(quantized_layers(model, keeps_tokens), first->keep_tokens()) : nlohmann::json(nullptr);
}

void reset_kept_positions(const Transformer& model) {
  for (const auto& named : model.linears())
    if (const auto* q = dynamic_cast<const QuantizedLinear*>(named.linear.get())) q->reset_kept_positions();
}

nlohmann::json engines_used_report(const Transformer& model) { return engines_report(quantized_layers(model, any_layer)); }

nlohmann::json outlier_features_report(const Transformer& model) {
  const QuantizedLinear* first = first_quantized(model, decomposes_outliers);
  return first ? outlier_report(quantized_layers(model, decomposes_outliers), *first->outlier_threshold())
               : nlohmann::json(nullptr);
}

void reset_outlier_features(const Transformer& model) {
  for (const auto& named : model.linears())
    if (const auto* q = dynamic_cast<const QuantizedLinear*>(named.linear.get())) q->reset_outlier_features();
}

}  // namespace qeval
