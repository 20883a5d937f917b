#include "eval/schemes.h"

#include "eval/ggml_imatrix.h"
#include "eval/rounding_band.h"
#include "quant/calibrated_weights.h"
#include "quant/calibration/static_scales.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/error.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "quant/schemes/spec.h"

namespace qeval {

StatsFor parse_stats_for(const std::string& s) {
  if (s == "none") return StatsFor::none;
  if (s == "full") return StatsFor::full;
  if (s == "all") return StatsFor::all;
  fail("unknown --stats-for '{}': expected one of none, full, all", s);
}

std::string to_string(StatsFor s) {
  switch (s) {
    case StatsFor::none: return "none";
    case StatsFor::full: return "full";
    case StatsFor::all: return "all";
  }
  return "?";
}

std::vector<std::string> parse_scheme_list(const std::string& list) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!name.empty()) {
      for (const auto& seen : names) QEVAL_CHECK(seen != name, "--schemes: '{}' is listed twice", name);
      names.push_back(name);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto full = std::find(names.begin(), names.end(), "full");
  if (full == names.end())
    names.insert(names.begin(), "full");
  else
    std::rotate(names.begin(), full, full + 1);
  return names;
}

std::vector<nlohmann::json> PreparedSchemes::statistics_summaries() const {
  std::vector<nlohmann::json> out;
  for (const auto& s : statistics) out.push_back(s ? s->summary() : nlohmann::json(nullptr));
  return out;
}

namespace {

// The parts of a rewrite's report known before any weight is read.
nlohmann::json description_before_run(const SchemeRewrite& rewrite) {
  nlohmann::json report = rewrite.report();
  for (const char* key : {"layers", "quantized_layers", "quantized_weight_bytes", "fp32_weight_bytes", "weight_bytes_ratio",
                          "model_linear_bytes", "model_linear_bytes_fp32", "kv_cache_error"})
    report.erase(key);
  report["execution"] = report.at("execution_path");
  return report;
}

// A scheme that would measure full precision under a quantised name is refused with the reason:
// linears that keep every position of the window in full precision (as the KV cache's keep is), and
// include / exclude / tensor_types that leave no linear to quantise. `given`: the --schemes entry.
void check_measures_something(const SchemeSpec& spec, const SchemeRewrite& rewrite, const ModelConfig& config,
                              const std::string& given, std::int64_t window_length) {
  if (!spec.quantizes_linears()) return;
  const std::string scheme = spec.name == given ? spec.name : fmt::format("{} ({})", spec.name, given);
  QEVAL_CHECK(!spec.keep_tokens.enabled() || window_length <= 0 || spec.keep_tokens.count < window_length,
              "scheme {}: keep_tokens.{} {} keeps every position of a {}-token window, so nothing of the linears would "
              "be quantised; keep fewer than {} positions (or use a longer --seq-len)",
              scheme, to_string(spec.keep_tokens.rule), spec.keep_tokens.count, window_length, window_length);
  if (!rewrite.quantized_linears(config).empty() || rewrite.quantizes_embedding()) return;
  std::int64_t in_blocks = 0, selected = 0;
  for (const std::string& name : model_linear_names(config)) {
    if (name.rfind("layers.", 0) == 0) ++in_blocks;
    if (spec.selects(name)) ++selected;
  }
  if (selected == 0) {
    std::string patterns;
    if (!spec.include.empty()) patterns = "include " + nlohmann::json(spec.include).dump();
    if (!spec.exclude.empty()) patterns += (patterns.empty() ? "" : " with ") + ("exclude " + nlohmann::json(spec.exclude).dump());
    fail("scheme {}: {} leaves no linear to quantise (of the model's {} linears in its blocks), so the record would show "
         "full precision under a quantised name; select at least one linear", scheme, patterns, in_blocks);
  }
  fail("scheme {}: tensor_types leaves every linear the scheme selects ({} of the model's {} linears in its blocks) in "
       "f32, so no linear would be quantised and the record would show full precision under a quantised name; give at "
       "least one a quantised type", scheme, selected, in_blocks);
}

// A scheme file may take a preset's name only when it is that preset (its description text aside):
// compare and check know a scheme by its name.
void check_preset_name(const SchemeSpec& spec, const std::string& given, const std::vector<std::string>& names) {
  if (spec.name == given) return;  // the preset itself
  // Beside the preset itself, two schemes of one name: make_schemes says that.
  if (std::find(names.begin(), names.end(), spec.name) != names.end()) return;
  if (!is_preset_name(spec.name)) return;
  const std::vector<std::string> differ = differences_from_preset(spec, preset_scheme(spec.name), 4);
  QEVAL_CHECK(differ.empty(),
              "scheme file {}: \"name\" is \"{}\", the preset {}'s name, but its spec is not the preset's ({}; the file's "
              "value first); give the scheme a name of its own", given, spec.name, spec.name, fmt::join(differ, "; "));
}

std::int64_t linear_bytes(std::int64_t out, std::int64_t in, bool bias) { return (out * in + (bias ? out : 0)) * 4; }

}  // namespace

std::int64_t full_linear_weight_bytes(const ModelConfig& c) {
  std::int64_t total = 0;
  for (const std::string& name : model_linear_names(c)) {
    const LinearShape s = linear_shape(c, name);
    total += linear_bytes(s.out, s.in, s.bias);
  }
  return total;
}

void PreparedSchemes::finish_descriptions() {
  for (std::size_t i = 0; i < schemes.size(); ++i) {
    if (!rewrites[i]) continue;
    nlohmann::json report = rewrites[i]->report();
    nlohmann::json& d = schemes[i].description;
    for (auto& [key, value] : report.items()) d[key] = value;
    d["execution"] = report.at("execution_path");
  }
}

std::vector<std::int64_t> PreparedSchemes::linear_weight_bytes() const {
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < schemes.size(); ++i) {
    const nlohmann::json& d = schemes[i].description;
    out.push_back(d.contains("model_linear_bytes") ? d.at("model_linear_bytes").get<std::int64_t>()
                                                   : d.value("model_linear_bytes_fp32", std::int64_t{0}));
  }
  return out;
}

nlohmann::json PreparedSchemes::kept_positions_report(std::size_t i) const {
  const nlohmann::json now = rewrites[i] ? rewrites[i]->kept_positions_report() : nlohmann::json(nullptr);
  if (i >= earlier_kept_positions.size()) return now;
  return add_kept_positions(earlier_kept_positions[i], now, "scheme " + schemes[i].name);
}
nlohmann::json PreparedSchemes::outlier_features_report(std::size_t i) const {
  return rewrites[i] ? rewrites[i]->outlier_features_report() : nlohmann::json(nullptr);
}
nlohmann::json PreparedSchemes::engines_used_report(std::size_t i) const {
  return rewrites[i] ? rewrites[i]->engines_used_report() : nlohmann::json(nullptr);
}

SchemeMeasuresList PreparedSchemes::measures() const {
  SchemeMeasuresList out(schemes.size());
  for (std::size_t i = 0; i < schemes.size(); ++i) {
    if (rewrites[i] && rewrites[i]->kv_cache()) out[i].kv_cache_errors = rewrites[i]->kv_cache()->error_sums();
    out[i].kept_positions = kept_positions_report(i);
  }
  return out;
}

void PreparedSchemes::add_measures(const SchemeMeasuresList& earlier, const std::string& source) {
  QEVAL_CHECK(earlier.size() == schemes.size(), "{}: has measures of {} schemes, this run has {}", source,
              earlier.size(), schemes.size());
  earlier_kept_positions.resize(schemes.size());
  for (std::size_t i = 0; i < schemes.size(); ++i) {
    const bool has_cache = rewrites[i] && rewrites[i]->kv_cache();
    QEVAL_CHECK(has_cache == earlier[i].kv_cache_errors.has_value(),
                "{}: scheme {} {} a quantised KV cache, but the state {} its error sums{}", source, schemes[i].name,
                has_cache ? "has" : "has no", earlier[i].kv_cache_errors ? "holds" : "lacks",
                has_cache ? " (written by a qeval that did not keep them); remove it to start again" : "");
    if (has_cache) rewrites[i]->kv_cache()->add_error_sums(*earlier[i].kv_cache_errors, source);
    const bool keeps = rewrites[i] && rewrites[i]->spec().keep_tokens.enabled();
    QEVAL_CHECK(keeps == !earlier[i].kept_positions.is_null(),
                "{}: scheme {} {} tokens in full precision, but the state {} the positions kept{}", source,
                schemes[i].name, keeps ? "keeps" : "keeps no", earlier[i].kept_positions.is_null() ? "lacks" : "holds",
                keeps ? " (written by a qeval that did not keep them); remove it to start again" : "");
    earlier_kept_positions[i] = earlier[i].kept_positions;
  }
}

std::shared_ptr<StatisticsCollector> attach_statistics(EvalScheme& scheme, const ModelConfig& config,
                                                      const StatisticsOptions& options) {
  StatisticsOptions statistics = options;
  statistics.attention_windows = config.attention_windows;  // sliding-window layers count differently
  statistics.layer_mixers = config.layer_mixers;             // which layers have attention, experts, ...
  statistics.layer_ffns = config.layer_ffns;
  statistics.experts = config.moe_experts;
  auto stats = std::make_shared<StatisticsCollector>(statistics);
  scheme.observer = stats;
  scheme.begin_batch = [collector = stats.get(), inner = scheme.begin_batch](const std::vector<std::int64_t>& windows) {
    collector->begin_batch(windows);
    if (inner) inner(windows);
  };
  return stats;
}

void use_rewrite(EvalScheme& scheme, const std::shared_ptr<SchemeRewrite>& rewrite, const ModelConfig& config) {
  scheme.rewrite_block = [rewrite](const Block& full) { return rewrite->rewrite(full); };
  scheme.rewrites_layer = [rewrite, config](std::int64_t layer) { return rewrite->selects_in_layer(config, layer); };
  if (rewrite->selects("lm_head"))
    scheme.rewrite_head = [rewrite](const std::shared_ptr<const Linear>& head) { return rewrite->rewrite_head(head); };
  rewrite->use_model(config);  // kind ggml: each tensor's type, and its tensor_types patterns checked, now
  if (rewrite->quantizes_embedding())
    scheme.rewrite_embedding_rows = [rewrite](const at::Tensor& rows) { return rewrite->rewrite_embedding_rows(rows); };
  // A quantised cache keeps its error sums by window, so any split of the windows reports the same.
  if (const std::shared_ptr<QuantizedKvCache>& cache = rewrite->kv_cache()) {
    auto inner = scheme.begin_batch;
    scheme.begin_batch = [cache, inner](const std::vector<std::int64_t>& windows) {
      cache->begin_windows(windows);
      if (inner) inner(windows);
    };
  }
}

PreparedSchemes make_schemes(const ModelConfig& config, const std::vector<std::string>& names,
                             const SchemeOptions& options) {
  PreparedSchemes prepared;
  const std::vector<std::string> linears = model_linear_names(config);
  const std::int64_t full_bytes = full_linear_weight_bytes(config);
  std::map<std::string, std::shared_ptr<const GgmlImportanceWeights>> imatrices;  // by path
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    EvalScheme scheme;
    scheme.name = name;
    std::shared_ptr<SchemeRewrite> rewrite;
    if (name == "full") {
      QEVAL_CHECK(i == 0, "make_schemes: full precision must come first");
      scheme.description = {{"execution", full_precision_execution(options.placement)},
                            {"scheme", scheme_to_json(preset_scheme("full"))},
                            {"model_linear_bytes_fp32", full_bytes}};
    } else {
      QEVAL_CHECK(i > 0, "make_schemes: the first scheme must be full precision, found '{}'", name);
      SchemeSpec spec = resolve_scheme(name);
      check_preset_name(spec, name, names);
      if (options.quantize_lm_head) spec.quantize_lm_head = true;
      if (options.quantize_ssm_inner) spec.quantize_ssm_inner = true;
      if (options.calibration_windows > 0) apply_calibration_windows(spec, options.calibration_windows);
      if (!options.imatrix.empty() && spec.weights.kind == QuantKind::ggml) spec.weights.ggml_imatrix = options.imatrix;
      if (!spec.weights.ggml_imatrix.empty()) {
        // Read once per file and shared by the schemes that name it.
        std::shared_ptr<const GgmlImportanceWeights>& read = imatrices[spec.weights.ggml_imatrix];
        try {
          if (!read) read = load_ggml_importance(spec.weights.ggml_imatrix, config);
        } catch (const Error& e) {
          fail("scheme {}: {}", spec.name, e.what());
        }
        spec.ggml_importance = read;
      }
      if (spec.needs_calibration()) {
        QEVAL_CHECK(options.calibrate != nullptr,
                    "scheme {}: its static input scale needs calibration windows, which this command does not provide",
                    spec.name);
        try {
          spec.calibrated = options.calibrate(spec);
        } catch (const Error& e) {  // the calibration source does not know which scheme asked
          fail("scheme {}: calibration.windows {}: {}", spec.name, spec.input_activations.calibration->windows, e.what());
        }
      }
      if (spec.needs_weight_calibration()) {
        const std::string method = spec.weights.gptq ? "GPTQ" : "AWQ";
        QEVAL_CHECK(!spec.quantize_lm_head, "scheme {}: its weights are calibrated with {}, which quantises the "
                    "blocks' linears only (as its references); leave out --quantize-lm-head", spec.name, method);
        QEVAL_CHECK(options.calibrate_weights != nullptr,
                    "scheme {}: its {} weights need calibration windows, which this command does not provide",
                    spec.name, method);
        try {
          spec.calibrated_weights = options.calibrate_weights(spec);
        } catch (const Error& e) {  // the calibration source does not know which scheme asked
          fail("scheme {}: {}.calibration.windows {}: {}", spec.name, spec.weights.method(),
               spec.weights.calibration_windows(), e.what());
        }
      }
      rewrite = std::make_shared<SchemeRewrite>(spec, linears);
      rewrite->check_model(config, "'" + config.architecture + "'");
      QEVAL_CHECK(!spec.kv_cache.enabled() || options.window_length <= 0 || spec.kv_cache.keep_first < options.window_length,
                  "scheme {}: kv_cache.keep_tokens.first {} keeps every position of a {}-token window, so nothing "
                  "of the cache would be quantised; keep fewer than {} positions (or use a longer --seq-len)",
                  spec.name, spec.kv_cache.keep_first, options.window_length, options.window_length);
      scheme.description = description_before_run(*rewrite);
      if (spec.needs_calibration()) scheme.description["static_scales"] = static_scales_description(spec, linears);
      if (spec.needs_weight_calibration()) scheme.description["calibrated_weights"] = spec.calibrated_weights->description;
      if (spec.ggml_importance) scheme.description["imatrix"] = spec.ggml_importance->description;
      use_rewrite(scheme, rewrite, config);
      check_measures_something(spec, *rewrite, config, name, options.window_length);
      // A scheme file is shown by its "name" (its stem when it has none); the path is recorded.
      if (spec.name != name) {
        scheme.name = spec.name;
        scheme.description["scheme_file"] = name;
      }
      if (!options.placement.is_default())
        scheme.description["placement"] = {{"device", options.placement.device.str()},
                                           {"dtype", dtype_name(options.placement.dtype)}};
    }
    for (const auto& earlier : prepared.schemes)
      QEVAL_CHECK(earlier.name != scheme.name, "--schemes: two schemes are named '{}' ({} and {}); give each a distinct \"name\"",
                  scheme.name, earlier.description.value("scheme_file", earlier.name), name);
    std::shared_ptr<StatisticsCollector> stats;
    if (options.stats_for == StatsFor::all || (options.stats_for == StatsFor::full && i == 0))
      stats = attach_statistics(scheme, config, options.statistics);
    if (rewrite && options.rounding_seed > 0) {
      const double eps = options.rounding_eps > 0 ? options.rounding_eps : kDefaultRoundingEps;
      jitter_quantised_inputs(scheme, static_cast<std::uint64_t>(options.rounding_seed), eps);
      scheme.description["rounding_seed"] = options.rounding_seed;
      scheme.description["rounding_eps"] = eps;
    }
    prepared.statistics.push_back(stats);
    prepared.rewrites.push_back(rewrite);
    prepared.schemes.push_back(std::move(scheme));
  }
  // --calibration-windows (and --calibration-data, --calibration-seq-len) act through the calibrated
  // schemes: without one they change nothing.
  std::vector<std::string> calibration_options = options.calibration_options;
  if (options.calibration_windows > 0)
    calibration_options.insert(calibration_options.begin(), fmt::format("--calibration-windows {}", options.calibration_windows));
  if (!calibration_options.empty()) {
    bool calibrated = false;
    for (const auto& r : prepared.rewrites)
      calibrated = calibrated || (r && (r->spec().needs_calibration() || r->spec().needs_weight_calibration()));
    QEVAL_CHECK(calibrated, "{}: {} the calibration of calibrated schemes (GPTQ's and AWQ's weights, static activation "
                "scales), and no scheme given calibrates anything; leave {} out", fmt::join(calibration_options, ", "),
                calibration_options.size() == 1 ? "sets" : "set", calibration_options.size() == 1 ? "it" : "them");
  }
  // --imatrix acts through the schemes of kind ggml: without one it changes nothing.
  if (!options.imatrix.empty()) {
    bool ggml = false;
    for (const auto& r : prepared.rewrites) ggml = ggml || (r && r->spec().weights.kind == QuantKind::ggml);
    QEVAL_CHECK(ggml, "--imatrix {}: llama.cpp's importance matrix is used by schemes of kind ggml (gguf-*), and no "
                "scheme given is one; leave it out", options.imatrix);
  }
  // --quantize-lm-head acts through the schemes that quantise linears: without one it changes nothing.
  if (options.quantize_lm_head) {
    std::vector<std::string> given;
    bool linears = false;
    for (std::size_t i = 0; i < prepared.schemes.size(); ++i) {
      given.push_back(prepared.schemes[i].name);
      linears = linears || (prepared.rewrites[i] && prepared.rewrites[i]->spec().quantizes_linears());
    }
    QEVAL_CHECK(linears, "--quantize-lm-head: quantises the LM head of every scheme that quantises linears, and no scheme "
                "quantises a linear (--schemes {}); leave it out, or add a scheme that quantises linears",
                fmt::join(given, ","));
  }
  // The rounding band's variants, after every named scheme so that those keep their places.
  QEVAL_CHECK(options.rounding_band >= 0 && options.rounding_band <= 64,
              "--rounding-band {}: expected 0 (none) to 64 variants per scheme", options.rounding_band);
  const double eps = options.rounding_eps > 0 ? options.rounding_eps : kDefaultRoundingEps;
  const std::size_t named = prepared.schemes.size();
  for (std::size_t i = 1; i < named && options.rounding_band > 0; ++i) {
    for (std::int64_t seed = 1; seed <= options.rounding_band; ++seed) {
      QEVAL_CHECK(seed != options.rounding_seed, "--rounding-seed {} is also one of --rounding-band's seeds (1 to {}): "
                  "the scheme and that variant would be the same run; take a seed above {}",
                  options.rounding_seed, options.rounding_band, options.rounding_band);
      std::shared_ptr<SchemeRewrite> rewrite;
      EvalScheme variant = rounding_variant(prepared.schemes[i], prepared.rewrites[i]->spec(), linears, config,
                                            static_cast<std::uint64_t>(seed), eps, rewrite);
      prepared.statistics.push_back(nullptr);
      prepared.rewrites.push_back(rewrite);
      prepared.schemes.push_back(std::move(variant));
    }
  }
  return prepared;
}


std::shared_ptr<FigureDataObserver> attach_figure_observer(EvalScheme& scheme, std::int64_t map_T) {
  auto figures = std::make_shared<FigureDataObserver>(map_T);
  if (scheme.observer)
    scheme.observer = std::make_shared<FanOutObserver>(std::vector<std::shared_ptr<ForwardObserver>>{scheme.observer, figures});
  else
    scheme.observer = figures;
  return figures;
}

}  // namespace qeval
