#include "quant/rewrite.h"

#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "common/error.h"
#include "kernels/int8_gemm.h"
#include "kernels/w4_gemm.h"
#include "quant/quantized_linear.h"

namespace qeval {
namespace {

void check_patterns_match(const Transformer& full, const SchemeSpec& spec) {
  std::vector<std::string> names;
  for (const auto& l : full.linears()) names.push_back(l.name);
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
  return nlohmann::json::object();
}

}  // namespace

QuantizedModel quantize_model(const Transformer& full, const SchemeSpec& spec) {
  validate_scheme(spec, "scheme " + spec.name);
  check_patterns_match(full, spec);
  const std::string why_not_kernel = kernel_path_unavailable_reason(spec);
  ExecutionPath path = ExecutionPath::reference;
  std::string path_text;
  if (!spec.quantizes_anything()) {
    path_text = "none (full precision)";
  } else if (spec.execution == ExecutionPreference::reference) {
    path_text = "reference";
  } else if (why_not_kernel.empty()) {
    path = ExecutionPath::kernel;
    path_text = "kernel";
  } else {
    QEVAL_CHECK(spec.execution != ExecutionPreference::kernel,
                "scheme {} asks for the kernel path, which it cannot run: {}", spec.name, why_not_kernel);
    path_text = "reference (" + why_not_kernel + ")";
  }

  QuantizedModel out{full, nlohmann::json::object()};
  nlohmann::json layers = nlohmann::json::array();
  std::int64_t quantized = 0, q_bytes = 0, fp32_bytes = 0;
  for (const auto& named : full.linears()) {
    const auto* fl = dynamic_cast<const FloatLinear*>(named.linear.get());
    QEVAL_CHECK(fl != nullptr, "quantize_model: linear {} is not a float linear ({}); quantise a full-precision model",
                named.name, named.linear->describe());
    const std::int64_t fp32 = (fl->weight().numel() + (fl->bias().defined() ? fl->bias().numel() : 0)) * 4;
    nlohmann::json layer = {{"name", named.name},
                            {"in_features", fl->in_features()},
                            {"out_features", fl->out_features()},
                            {"fp32_weight_bytes", fp32}};
    if (spec.selects(named.name)) {
      auto q = std::make_shared<QuantizedLinear>(named.name, fl->weight(), fl->bias(), spec, path);
      layer["quantized"] = true;
      layer["describe"] = q->describe();
      layer["weight_bytes"] = q->weight_bytes();
      ++quantized;
      q_bytes += q->weight_bytes();
      fp32_bytes += fp32;
      out.model.replace_linear(named.name, std::move(q));
    } else {
      layer["quantized"] = false;
      layer["describe"] = fl->describe();
      layer["weight_bytes"] = fl->weight_bytes();
    }
    layers.push_back(std::move(layer));
  }
  out.report = {{"scheme", scheme_to_json(spec)},
                {"execution_path", path_text},
                {"kernel_path_available", why_not_kernel.empty()},
                {"kernel_path_unavailable_reason", why_not_kernel},
                {"kernels", path == ExecutionPath::kernel ? kernel_backends(spec) : nlohmann::json::object()},
                {"layers", std::move(layers)},
                {"quantized_layers", quantized},
                {"quantized_weight_bytes", q_bytes},
                {"fp32_weight_bytes", fp32_bytes},
                {"weight_bytes_ratio", fp32_bytes > 0 ? static_cast<double>(q_bytes) / fp32_bytes : 1.0},
                {"model_linear_bytes", out.model.linear_weight_bytes()},
                {"model_linear_bytes_fp32", full.linear_weight_bytes()}};
  return out;
}

nlohmann::json kept_positions_report(const Transformer& model) {
  nlohmann::json layers = nlohmann::json::array();
  std::map<std::int64_t, std::int64_t> total;
  const QuantizedLinear* first = nullptr;
  std::int64_t sequences = 0;
  auto pairs = [](const std::map<std::int64_t, std::int64_t>& counts) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [position, n] : counts) out.push_back({position, n});
    return out;
  };
  for (const auto& named : model.linears()) {
    const auto* q = dynamic_cast<const QuantizedLinear*>(named.linear.get());
    if (q == nullptr || !q->keep_tokens().enabled()) continue;
    const QuantizedLinear::KeptPositions kept = q->kept_positions();
    if (first == nullptr) first = q, sequences = kept.sequences;
    for (const auto& [position, n] : kept.counts) total[position] += n;
    layers.push_back({{"name", named.name}, {"sequences", kept.sequences}, {"positions", pairs(kept.counts)}});
  }
  if (first == nullptr) return nullptr;
  return {{"rule", to_string(first->keep_tokens().rule)},
          {"count", first->keep_tokens().count},
          {"sequences", sequences},
          {"positions", pairs(total)},
          {"layers", std::move(layers)}};
}

void reset_kept_positions(const Transformer& model) {
  for (const auto& named : model.linears())
    if (const auto* q = dynamic_cast<const QuantizedLinear*>(named.linear.get())) q->reset_kept_positions();
}

nlohmann::json engines_used_report(const Transformer& model) {
  std::set<std::string> engines;
  for (const auto& named : model.linears())
    if (const auto* q = dynamic_cast<const QuantizedLinear*>(named.linear.get()))
      for (const std::string& e : q->engines_used()) engines.insert(e);
  return engines.empty() ? nlohmann::json(nullptr) : nlohmann::json(engines);
}

nlohmann::json outlier_features_report(const Transformer& model) {
  nlohmann::json layers = nlohmann::json::array();
  const QuantizedLinear* first = nullptr;
  std::int64_t sequences = 0;
  double sum_of_means = 0;
  for (const auto& named : model.linears()) {
    const auto* q = dynamic_cast<const QuantizedLinear*>(named.linear.get());
    if (q == nullptr || !q->outlier_threshold()) continue;
    const QuantizedLinear::OutlierFeatures log = q->outlier_features();
    if (first == nullptr) first = q, sequences = log.sequences;
    const double mean = log.sequences > 0 ? static_cast<double>(log.total) / static_cast<double>(log.sequences) : 0.0;
    sum_of_means += mean;
    nlohmann::json features = nlohmann::json::array();
    for (const auto& [feature, n] : log.counts) features.push_back({feature, n});
    layers.push_back({{"name", named.name},
                      {"in_features", q->in_features()},
                      {"sequences", log.sequences},
                      {"mean_outlier_features", mean},
                      {"max_outlier_features", log.max},
                      {"features", std::move(features)}});
  }
  if (first == nullptr) return nullptr;
  const double mean = sum_of_means / static_cast<double>(layers.size());
  return {{"threshold", outlier_threshold_for_json(*first->outlier_threshold())},
          {"sequences", sequences},
          {"layers", std::move(layers)},
          {"mean_outlier_features", mean}};
}

void reset_outlier_features(const Transformer& model) {
  for (const auto& named : model.linears())
    if (const auto* q = dynamic_cast<const QuantizedLinear*>(named.linear.get())) q->reset_outlier_features();
}

}  // namespace qeval
