#include "eval/schemes.h"

#include <algorithm>
#include <set>

#include "common/error.h"
#include "quant/rewrite.h"
#include "quant/scheme.h"

namespace qeval {
namespace {

bool spec_quantizes_lm_head(const nlohmann::json& description) {
  return description.contains("scheme") && description["scheme"].value("quantize_lm_head", false);
}

}  // namespace

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

PreparedSchemes make_schemes(const Transformer& full, const std::vector<std::string>& names,
                             const SchemeOptions& options) {
  PreparedSchemes prepared;
  PlacementCache cache(options.placement);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    EvalScheme scheme{name, full, nlohmann::json::object(), nullptr, {}};
    if (name == "full") {
      QEVAL_CHECK(i == 0, "make_schemes: full precision must come first");
      scheme.description = {{"execution", full_precision_execution(options.placement)},
                            {"scheme", scheme_to_json(preset_scheme("full"))}};
    } else {
      QEVAL_CHECK(i > 0, "make_schemes: the first scheme must be full precision, found '{}'", name);
      SchemeSpec spec = resolve_scheme(name);
      if (options.quantize_lm_head) spec.quantize_lm_head = true;
      QuantizedModel q = quantize_model(full, spec);
      scheme.model = std::move(q.model);
      scheme.description = q.report;
      scheme.description["execution"] = q.report.at("execution_path");
      // A scheme file is shown by its "name" (its stem when it has none); the path is recorded.
      if (spec.name != name) {
        scheme.name = spec.name;
        scheme.description["scheme_file"] = name;
      }
    }
    if (!options.placement.is_default()) {
      scheme.model = scheme.model.placed(cache);
      if (i > 0) {
        std::set<std::string> engines;  // what the placed quantised layers run, once each
        for (const auto& named : scheme.model.linears())
          if (named.name != "lm_head" || spec_quantizes_lm_head(scheme.description)) engines.insert(named.linear->describe());
        scheme.description["placement"] = {{"device", options.placement.device.str()},
                                           {"dtype", dtype_name(options.placement.dtype)},
                                           {"layer_engines", engines}};
      }
    }
    for (const auto& earlier : prepared.schemes)
      QEVAL_CHECK(earlier.name != scheme.name, "--schemes: two schemes are named '{}' ({} and {}); give each a distinct \"name\"",
                  scheme.name, earlier.description.value("scheme_file", earlier.name), name);
    std::shared_ptr<StatisticsCollector> stats;
    if (options.stats_for == StatsFor::all || (options.stats_for == StatsFor::full && i == 0)) {
      StatisticsOptions statistics = options.statistics;
      statistics.attention_windows = full.config().attention_windows;  // sliding-window layers count differently
      stats = std::make_shared<StatisticsCollector>(statistics);
      scheme.observer = stats;
      scheme.begin_batch = [collector = stats.get()](const std::vector<std::int64_t>& windows) {
        collector->begin_batch(windows);
      };
    }
    prepared.statistics.push_back(stats);
    prepared.schemes.push_back(std::move(scheme));
  }
  return prepared;
}

}  // namespace qeval
