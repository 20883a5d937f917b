#include "eval/sensitivity.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "eval/rounding_band.h"
#include "eval/schemes.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json number(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

// ---------------------------------------------------------------------------------------------
// Per-position ΔNLL. evaluate() keeps per-window sums only; these pieces see the same logits and
// targets and keep, per scheme, sums per position of the target token in its window.

struct PositionTotals {
  std::vector<double> sum;           // Σ d by target position
  std::vector<std::int64_t> count;   // tokens by target position
  double first_sum = 0, rest_sum = 0;
  std::int64_t first_tokens = 0, rest_tokens = 0;
};

// Per-position ΔNLL of a variant: the evaluator hands each scored batch's per-token NLL
// (eval/vocab_scoring.h TokenValues, the values its window rows are summed from) of the variant
// and of full precision; d = nll_variant − nll_full per target position.
void add_penalties(PositionTotals& tot, const std::vector<std::int64_t>& first_scored, const TokenValues& values,
                   const TokenValues& full) {
  const std::int64_t B = values.nll.size(0), P = values.nll.size(1), L = P + 1;
  if (static_cast<std::int64_t>(tot.sum.size()) < L) {
    tot.sum.resize(static_cast<std::size_t>(L), 0.0);
    tot.count.resize(static_cast<std::size_t>(L), 0);
  }
  const double* n = values.nll.data_ptr<double>();
  const double* fn = full.nll.data_ptr<double>();
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t from = first_scored[static_cast<std::size_t>(b)];
    for (std::int64_t pos = from; pos < L; ++pos) {  // target position; its prediction is pos − 1
      const double d = n[b * P + pos - 1] - fn[b * P + pos - 1];
      tot.sum[static_cast<std::size_t>(pos)] += d;
      tot.count[static_cast<std::size_t>(pos)] += 1;
      if (pos == from) {
        tot.first_sum += d;
        tot.first_tokens += 1;
      } else {
        tot.rest_sum += d;
        tot.rest_tokens += 1;
      }
    }
  }
}

void check_patterns(const std::vector<std::string>& names, const SchemeSpec& spec) {
  for (const auto* list : {&spec.include, &spec.exclude})
    for (const auto& pattern : *list) {
      bool any = false;
      for (const auto& n : names) any = any || glob_match(pattern, n);
      QEVAL_CHECK(any, "sensitivity: scheme {}: {} pattern '{}' matches no linear of this model; its linears are: {}",
                  spec.name, list == &spec.include ? "include" : "exclude", pattern, fmt::join(names, ", "));
    }
}

UnitInputStats unit_inputs(const LinearInputRecorder& recorder, const SensitivityUnit& unit) {
  UnitInputStats u;
  const double n = static_cast<double>(unit.layers.size());
  bool first = true;
  for (const auto& layer : unit.layers) {
    const LinearInputSummary s = recorder.summary(layer);
    u.kurtosis_first += s.kurtosis_first / n;
    u.kurtosis_rest += s.kurtosis_rest / n;
    u.max_abs_first += s.max_abs_first / n;
    u.max_abs_rest += s.max_abs_rest / n;
    u.inf_over_l2_first += s.inf_over_l2_first / n;
    u.inf_over_l2_rest += s.inf_over_l2_rest / n;
    if (first || std::abs(s.largest_value) > std::abs(u.largest_value)) {
      u.largest_value = s.largest_value;
      u.largest_layer = layer;
      u.largest_feature = s.largest_feature;
    }
    first = false;
  }
  return u;
}

std::vector<PositionPenalty> top_positions(const PositionTotals& t, std::int64_t k) {
  std::vector<PositionPenalty> all;
  for (std::size_t p = 0; p < t.count.size(); ++p)
    if (t.count[p] > 0)
      all.push_back({static_cast<std::int64_t>(p), t.count[p], t.sum[p] / static_cast<double>(t.count[p])});
  std::stable_sort(all.begin(), all.end(),
                   [](const PositionPenalty& a, const PositionPenalty& b) { return a.dnll_mean > b.dnll_mean; });
  if (static_cast<std::int64_t>(all.size()) > k) all.resize(static_cast<std::size_t>(std::max<std::int64_t>(k, 0)));
  return all;
}



}  // namespace

SensitivityGrouping parse_sensitivity_grouping(const std::string& s) {
  if (s == "layer") return SensitivityGrouping::layer;
  if (s == "kind") return SensitivityGrouping::kind;
  fail("unknown sensitivity grouping '{}': expected layer (one linear at a time) or kind (one layer kind across all "
       "blocks at a time)",
       s);
}

std::string to_string(SensitivityGrouping g) { return g == SensitivityGrouping::kind ? "kind" : "layer"; }

std::string linear_kind(const std::string& linear_name) {
  if (linear_name.rfind("layers.", 0) != 0) return linear_name;
  const auto dot = linear_name.find('.', 7);
  if (dot == std::string::npos) return linear_name;
  std::string kind = linear_name.substr(dot + 1);
  // Every expert's projection of one kind is one unit: "moe.experts.*.up", not one unit per expert.
  if (kind.rfind("moe.experts.", 0) == 0) {
    const auto end = kind.find('.', 12);
    if (end != std::string::npos) kind = "moe.experts.*" + kind.substr(end);
  }
  return kind;
}

std::vector<SensitivityUnit> sensitivity_units(const ModelConfig& config, const SchemeSpec& base, SensitivityGrouping by) {
  const std::vector<std::string> model_names = model_linear_names(config);
  validate_scheme(base, "scheme " + base.name);
  QEVAL_CHECK(base.quantizes_anything(),
              "sensitivity: scheme {} quantises nothing (full precision): there is no penalty to attribute; give a "
              "quantisation preset ({}) or a scheme file",
              base.name, fmt::join(preset_names(), ", "));
  check_patterns(model_names, base);
  std::vector<SensitivityUnit> units;
  std::map<std::string, std::size_t> by_kind;
  const std::vector<std::string>& names = model_names;
  for (const auto& name : model_names) {
    if (!base.selects(name)) continue;
    if (by == SensitivityGrouping::layer) {
      units.push_back({name, {name}});
      continue;
    }
    const std::string kind = linear_kind(name);
    auto [it, added] = by_kind.emplace(kind, units.size());
    if (added) units.push_back({kind, {}});
    units[it->second].layers.push_back(name);
  }
  // A kv_cache-only scheme (kv-*) has no linear to rank: say so rather than list include/exclude.
  QEVAL_CHECK(!units.empty() || !base.kv_cache.enabled() || base.quantizes_linears(),
              "sensitivity: scheme {} quantises only the key/value cache (kv_cache, format {}); sensitivity ranks the "
              "linear layers a scheme quantises one unit at a time, and this scheme quantises none; evaluate it with "
              "qeval eval", base.name, to_string(base.kv_cache.format));
  QEVAL_CHECK(!units.empty(),
              "sensitivity: scheme {} selects no linear of this model (include [{}], exclude [{}], quantize_lm_head {}); "
              "its linears are: {}",
              base.name, fmt::join(base.include, ", "), fmt::join(base.exclude, ", "), base.quantize_lm_head,
              fmt::join(names, ", "));
  return units;
}

SchemeSpec unit_scheme(const SchemeSpec& base, const SensitivityUnit& unit) {
  SchemeSpec s = base;
  s.name = base.name + "@" + unit.name;
  s.include = unit.layers;
  s.exclude.clear();  // every name in include is one the base selects: nothing left to exclude
  return s;
}

SensitivityRun run_sensitivity(ModelReader& full, const SchemeSpec& base, WindowSource& windows,
                               const SensitivityOptions& options) {
  QEVAL_CHECK(options.top_positions >= 0, "sensitivity: top_positions must be >= 0, found {}", options.top_positions);
  SensitivityRun run;
  run.base = base;
  run.by = options.by;
  const ModelConfig& config = full.config();
  const std::vector<SensitivityUnit> units = sensitivity_units(config, base, options.by);
  auto totals = std::make_shared<std::vector<PositionTotals>>(units.size() + 1);

  // Scheme 0: full precision, its selected linears' inputs recorded (each block wrapped once
  // placed). The variants are rewritten from the unwrapped full-precision blocks.
  std::vector<std::string> recorded;
  for (const auto& u : units) recorded.insert(recorded.end(), u.layers.begin(), u.layers.end());
  std::sort(recorded.begin(), recorded.end(), [order = model_linear_names(config)](const std::string& a, const std::string& b) {
    return std::find(order.begin(), order.end(), a) < std::find(order.begin(), order.end(), b);
  });
  run.inputs = std::make_shared<LinearInputRecorder>(recorded);
  EvalScheme reference;
  reference.name = "full";
  reference.description = {{"execution", full_precision_execution(options.placement)},
                           {"scheme", scheme_to_json(preset_scheme("full"))}};
  reference.wrap_block = [recorder = run.inputs](const Block& block) { return record_block_inputs(block, recorder); };
  if (run.inputs->records("lm_head"))
    reference.on_head_input = [recorder = run.inputs](const at::Tensor& x) { recorder->record(recorder->slot("lm_head"), x); };
  run.schemes.push_back(std::move(reference));
  run.rewrites.push_back(nullptr);
  const std::vector<std::string> names = model_linear_names(config);
  for (std::size_t i = 0; i < units.size(); ++i) {
    const SchemeSpec spec = unit_scheme(base, units[i]);
    auto rewrite = std::make_shared<SchemeRewrite>(spec, names);
    EvalScheme scheme;
    scheme.name = spec.name;
    scheme.description = rewrite->report();
    scheme.description["execution"] = scheme.description.at("execution_path");
    scheme.description["sensitivity_unit"] = {{"by", to_string(options.by)}, {"unit", units[i].name}, {"layers", units[i].layers}};
    scheme.rewrite_block = [rewrite](const Block& b) { return rewrite->rewrite(b); };
    scheme.rewrites_layer = [rewrite, config](std::int64_t layer) { return rewrite->selects_in_layer(config, layer); };
    if (rewrite->selects("lm_head"))
      scheme.rewrite_head = [rewrite](const std::shared_ptr<const Linear>& head) { return rewrite->rewrite_head(head); };
    scheme.on_token_values = [totals, index = i + 1](const std::vector<std::int64_t>&, const std::vector<std::int64_t>& first,
                                                     const TokenValues& values, const TokenValues& full_values) {
      add_penalties((*totals)[index], first, values, full_values);
    };
    run.schemes.push_back(std::move(scheme));
    run.rewrites.push_back(std::move(rewrite));
  }
  QEVAL_CHECK(options.rounding_band >= 0 && options.rounding_band <= 64,
              "sensitivity --rounding-band {}: expected 0 (none) to 64 variants per unit", options.rounding_band);
  const double eps = options.rounding_eps > 0 ? options.rounding_eps : kDefaultRoundingEps;
  for (std::size_t i = 0; i < units.size() && options.rounding_band > 0; ++i)
    for (std::int64_t seed = 1; seed <= options.rounding_band; ++seed) {
      std::shared_ptr<SchemeRewrite> rewrite;
      EvalScheme variant = rounding_variant(run.schemes[i + 1], run.rewrites[i + 1]->spec(), names, config,
                                            static_cast<std::uint64_t>(seed), eps, rewrite);
      run.schemes.push_back(std::move(variant));
      run.rewrites.push_back(std::move(rewrite));
    }

  EvalOptions eval_options;
  eval_options.batch_size = options.batch_size;
  eval_options.progress = options.progress;
  eval_options.expected_windows = options.expected_windows;
  eval_options.placement = options.placement;
  eval_options.plan = options.plan ? options.plan(run.schemes, run.rewrites) : EvalPlan{};
  run.result = evaluate(full, run.schemes, windows, eval_options);
  for (std::size_t i = 1; i < run.schemes.size(); ++i) {
    nlohmann::json report = run.rewrites[i]->report();
    for (auto& [key, value] : report.items()) run.schemes[i].description[key] = value;
  }

  const SchemeSummary reference_summary = run.result.schemes.front().summary();
  for (std::size_t i = 0; i < units.size(); ++i) {
    UnitSensitivity u;
    u.unit = units[i];
    u.scheme_index = i + 1;
    u.scheme = run.schemes[u.scheme_index].name;
    u.summary = run.result.schemes[u.scheme_index].summary();
    u.dppl_rel = reference_summary.ppl > 0 ? (u.summary.ppl - reference_summary.ppl) / reference_summary.ppl : 0.0;
    u.inputs = unit_inputs(*run.inputs, units[i]);
    const PositionTotals& t = (*totals)[u.scheme_index];
    u.first_tokens = t.first_tokens;
    u.rest_tokens = t.rest_tokens;
    u.first_dnll_sum = t.first_sum;
    u.rest_dnll_sum = t.rest_sum;
    const double total = t.first_sum + t.rest_sum;
    u.first_share = total > 0 ? t.first_sum / total : std::numeric_limits<double>::quiet_NaN();
    u.top_positions = top_positions(t, options.top_positions);
    run.units.push_back(std::move(u));
  }
  std::stable_sort(run.units.begin(), run.units.end(), [](const UnitSensitivity& a, const UnitSensitivity& b) {
    return a.summary.diff_mean > b.summary.diff_mean;
  });
  return run;
}

json SensitivityRun::to_json() const {
  const SchemeSummary reference = result.schemes.front().summary();
  json list = json::array();
  for (std::size_t r = 0; r < units.size(); ++r) {
    const UnitSensitivity& u = units[r];
    auto mean = [](double sum, std::int64_t n) { return n > 0 ? number(sum / static_cast<double>(n)) : json(nullptr); };
    json top = json::array();
    for (const auto& p : u.top_positions)
      top.push_back({{"position", p.position}, {"tokens", p.tokens}, {"dnll_mean", number(p.dnll_mean)}});
    list.push_back(
        {{"rank", r + 1},
         {"unit", u.unit.name},
         {"scheme", u.scheme},
         {"layers", u.unit.layers},
         {"dnll_mean", number(u.summary.diff_mean)},
         {"dnll_se", number(u.summary.diff_se)},
         {"dppl", number(u.summary.ppl - reference.ppl)},
         {"dppl_rel", number(u.dppl_rel)},
         {"kl_mean", number(u.summary.kl_mean)},
         {"top1_agreement", number(u.summary.top1_agreement)},
         {"inputs",
          {{"kurtosis", {{"first", number(u.inputs.kurtosis_first)}, {"rest", number(u.inputs.kurtosis_rest)}}},
           {"max_abs", {{"first", number(u.inputs.max_abs_first)}, {"rest", number(u.inputs.max_abs_rest)}}},
           {"inf_over_l2", {{"first", number(u.inputs.inf_over_l2_first)}, {"rest", number(u.inputs.inf_over_l2_rest)}}},
           {"largest",
            {{"value", number(u.inputs.largest_value)},
             {"abs", number(std::abs(u.inputs.largest_value))},
             {"layer", u.inputs.largest_layer},
             {"feature", u.inputs.largest_feature}}}}},
         {"tokens",
          {{"first", {{"tokens", u.first_tokens}, {"dnll_sum", number(u.first_dnll_sum)}, {"dnll_mean", mean(u.first_dnll_sum, u.first_tokens)}}},
           {"rest", {{"tokens", u.rest_tokens}, {"dnll_sum", number(u.rest_dnll_sum)}, {"dnll_mean", mean(u.rest_dnll_sum, u.rest_tokens)}}},
           {"first_share", number(u.first_share)},
           {"top_positions", top}}}});
  }
  return {{"scheme", base.name},
          {"base_scheme", scheme_to_json(base)},
          {"by", to_string(by)},
          {"definitions",
           {{"unit", "layer: one linear the scheme selects; kind: one canonical kind (e.g. mlp.down) across all blocks, "
                     "among the linears the scheme selects. The unit's scheme is the base with include = its layers."},
            {"dnll", "paired per-token NLL difference (unit's scheme minus full precision) over the scored tokens, mean "
                     "and standard error, as the record's vs_full.paired_dnll_mean / paired_dnll_se"},
            {"first_share", "sum of the per-token difference over the first scored position of every window, divided by "
                            "its sum over all scored positions (null when that total is not positive)"},
            {"top_positions", "positions (0-based index of the target token in its window) with the largest mean "
                              "per-token difference over windows"},
            {"inputs", "statistics of the unit's full-precision linear inputs (see linear_inputs.definitions); for a kind "
                       "the mean over its layers, largest: the largest |x| of any of them"}}},
          {"full", {{"nll_mean", number(reference.nll_mean)}, {"ppl", number(reference.ppl)}}},
          {"units", list},
          {"linear_inputs", inputs ? inputs->to_json(false) : json(nullptr)}};
}

}  // namespace qeval
