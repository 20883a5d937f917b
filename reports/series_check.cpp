#include "reports/series_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <optional>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/strict_json.h"
#include "common/json_integer.h"
#include "reports/compare.h"
#include "records/record.h"
#include "records/series_record.h"

namespace qeval {
namespace {

const std::set<std::string> kSchemeQuantities = {"ppl",     "nll_mean",       "dppl", "paired_dnll_mean",
                                                  "kl_mean", "top1_agreement"};

struct Rule {
  std::string scheme, name, text;
  nlohmann::json at = "last";         // "last" | "every" | step
  nlohmann::json reference = nullptr;  // null | "first" | "first_past_warmup" | "baseline" | step
  std::optional<std::int64_t> warmup;
  std::optional<double> max, min, max_ratio, max_increase;
};

std::optional<double> number(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return std::nullopt;
  QEVAL_CHECK(j[key].is_number() && std::isfinite(j[key].get<double>()), "{}: \"{}\" should be a finite number, found {}",
              where, key, j[key].dump());
  return j[key].get<double>();
}

Rule parse_rule(const nlohmann::json& j, const std::string& where) {
  QEVAL_CHECK(j.is_object(), "{}: a rule is a JSON object, found {}", where, j.dump());
  static const std::set<std::string> keys = {"quantity", "at",  "reference", "warmup",      "max",
                                             "min",      "max_ratio", "max_increase", "description"};
  for (const auto& [k, v] : j.items())
    QEVAL_CHECK(keys.count(k), "{}: unknown key \"{}\" (expected one of: {})", where, k, fmt::join(keys, ", "));
  Rule r;
  QEVAL_CHECK(j.contains("quantity") && j["quantity"].is_string(), "{}: \"quantity\" (SCHEME.NAME) is required", where);
  const std::string q = j["quantity"].get<std::string>();
  const auto dot = q.rfind('.');
  QEVAL_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < q.size(),
              "{}: \"quantity\" should be SCHEME.NAME (e.g. int8-coarse.dppl, full.sink_rate_pct), found '{}'", where, q);
  r.scheme = q.substr(0, dot);
  r.name = q.substr(dot + 1);
  std::set<std::string> known = kSchemeQuantities;
  for (const auto& [name, path] : statistic_names()) known.insert(name);
  QEVAL_CHECK(known.count(r.name), "{}: unknown quantity '{}' in '{}' (expected one of: {})", where, r.name, q,
              fmt::join(known, ", "));
  r.text = q;
  if (j.contains("at")) {
    r.at = j["at"];
    QEVAL_CHECK(r.at == "last" || r.at == "every" || json_int64(r.at), "{}: \"at\" should be \"last\", \"every\" or a "
                "step number, found {}", where, r.at.dump());
  }
  if (j.contains("reference")) {
    r.reference = j["reference"];
    QEVAL_CHECK(r.reference == "first" || r.reference == "first_past_warmup" || r.reference == "baseline" ||
                    json_int64(r.reference),
                "{}: \"reference\" should be \"first\", \"first_past_warmup\", \"baseline\" or a step number, found {}",
                where, r.reference.dump());
  }
  if (j.contains("warmup")) r.warmup = json_integer(j["warmup"], where + ": warmup");
  // Steps count from 0: a negative warm-up or step would select the first checkpoint in silence.
  QEVAL_CHECK(!r.warmup || *r.warmup >= 0, "{}: \"warmup\" should be a step count >= 0, found {}", where, *r.warmup);
  for (const nlohmann::json* step : {&r.at, &r.reference})
    QEVAL_CHECK(!json_int64(*step) || *json_int64(*step) >= 0, "{}: a step number should be >= 0, found {}", where,
                step->dump());
  r.max = number(j, "max", where);
  r.min = number(j, "min", where);
  r.max_ratio = number(j, "max_ratio", where);
  r.max_increase = number(j, "max_increase", where);
  QEVAL_CHECK(r.max || r.min || r.max_ratio || r.max_increase,
              "{}: give at least one limit: max, min, max_ratio or max_increase", where);
  QEVAL_CHECK(!(r.max_ratio || r.max_increase) || !r.reference.is_null(),
              "{}: max_ratio and max_increase compare with a reference: add \"reference\"", where);
  return r;
}

const nlohmann::json* entry_at(const nlohmann::json& series, std::int64_t step) {
  for (const auto& e : series.at("checkpoints"))
    if (e.at("step").get<std::int64_t>() == step) return &e;
  return nullptr;
}

// The value of `rule`'s quantity in a checkpoint entry; null when not collected. Throws when the
// series never evaluated the scheme (the gate cannot mean anything then).
nlohmann::json value_of(const nlohmann::json& entry, const Rule& rule, const std::string& source) {
  if (kSchemeQuantities.count(rule.name)) {
    for (const auto& s : entry.at("schemes"))
      if (s.at("name") == rule.scheme) return s.value(rule.name, nlohmann::json(nullptr));
    fail("{}: step {} has no scheme '{}' (rule {})", source, entry.at("step").dump(), rule.scheme, rule.text);
  }
  const nlohmann::json& st = entry.at("statistics");
  QEVAL_CHECK(st.contains(rule.scheme), "{}: step {} has no statistics for scheme '{}' (rule {}; evaluate with --stats-for {})",
              source, entry.at("step").dump(), rule.scheme, rule.text, rule.scheme == "full" ? "full" : "all");
  return st[rule.scheme].value(rule.name, nlohmann::json(nullptr));
}

// The reference checkpoint of a rule, for the checked checkpoint `entry`; null when the baseline
// lacks that step.
const nlohmann::json* reference_entry(const Rule& rule, const nlohmann::json& series, const nlohmann::json& baseline,
                                      const nlohmann::json& entry, const std::string& source) {
  const auto& checkpoints = series.at("checkpoints");
  if (rule.reference == "first") return &checkpoints.front();
  if (rule.reference == "baseline") {
    QEVAL_CHECK(!baseline.is_null(), "rule {} compares with \"baseline\": give --baseline B.json (a series record)", rule.text);
    return entry_at(baseline, entry.at("step").get<std::int64_t>());
  }
  if (rule.reference == "first_past_warmup") {
    std::optional<std::int64_t> warmup = rule.warmup;
    if (!warmup) {
      const nlohmann::json w = checkpoints.front().value("training", nlohmann::json::object()).value("warmup", nlohmann::json(nullptr));
      QEVAL_CHECK(json_int64(w) && *json_int64(w) >= 0,
                  "{}: the series does not know its warm-up (rule {}; found {}): add \"warmup\": STEPS to the rule",
                  source, rule.text, w.dump());
      warmup = *json_int64(w);
    }
    for (const auto& e : checkpoints)
      if (e.at("step").get<std::int64_t>() >= *warmup) return &e;
    fail("{}: no checkpoint at or past the warm-up's {} steps (rule {})", source, *warmup, rule.text);
  }
  const std::int64_t step = *json_int64(rule.reference);
  const nlohmann::json* e = entry_at(series, step);
  QEVAL_CHECK(e, "{}: rule {} compares with step {}, which the series does not have", source, rule.text, step);
  return e;
}

std::string fmt_value(double v) { return fmt::format("{:.6g}", v); }

void judge_rule(const Rule& rule, const nlohmann::json& series, const nlohmann::json& baseline,
                const nlohmann::json& entry, const std::string& source, CheckReport& report) {
  const std::int64_t step = entry.at("step").get<std::int64_t>();
  const nlohmann::json value = value_of(entry, rule, source);
  auto item = [&](const std::string& what, const nlohmann::json& reference, double change, double allowed,
                  const std::string& limit) {
    CheckItem i;
    i.scheme = fmt::format("step {}", step);
    i.quantity = what;
    i.baseline = reference;
    i.current = value;
    i.change = value.is_number() ? change : std::nan("");
    i.allowed = allowed;
    i.rule = limit;
    i.violated = !value.is_number() || !(i.change <= allowed);
    report.items.push_back(i);
  };
  const double v = value.is_number() ? value.get<double>() : NAN;
  if (rule.max) item(rule.text, nullptr, v, *rule.max, fmt::format("≤ {}", fmt_value(*rule.max)));
  if (rule.min) item(rule.text, nullptr, *rule.min - v, 0, fmt::format("≥ {} (worse by: below it)", fmt_value(*rule.min)));
  if (!rule.max_ratio && !rule.max_increase) return;
  const nlohmann::json* ref = reference_entry(rule, series, baseline, entry, source);
  if (!ref) {
    report.notes.push_back(fmt::format("{} at step {}: the baseline has no step {}, not checked", rule.text, step, step));
    return;
  }
  const std::string ref_name = rule.reference == "baseline" ? fmt::format("baseline's step {}", step)
                                                             : fmt::format("step {}", ref->at("step").dump());
  const nlohmann::json rv = value_of(*ref, rule, rule.reference == "baseline" ? "baseline" : source);
  if (!rv.is_number()) {
    report.notes.push_back(fmt::format("{} at step {}: null at the reference ({}), not checked", rule.text, step, ref_name));
    return;
  }
  const double r = rv.get<double>();
  if (rule.max_ratio) {
    QEVAL_CHECK(r > 0, "{}: rule {} bounds a ratio to {} = {}, which is not positive; use max_increase", source,
                rule.text, ref_name, fmt_value(r));
    item(fmt::format("{} / {}", rule.text, ref_name), rv, v / r, *rule.max_ratio,
         fmt::format("ratio ≤ {}", fmt_value(*rule.max_ratio)));
  }
  if (rule.max_increase)
    item(fmt::format("{} − {}", rule.text, ref_name), rv, v - r, *rule.max_increase,
         fmt::format("increase ≤ {}", fmt_value(*rule.max_increase)));
}

void require_same_measurement(const nlohmann::json& a, const nlohmann::json& b, const std::string& as,
                              const std::string& bs, const CheckOptions& options, CheckReport& report) {
  auto measure = [](const nlohmann::json& s) {
    const nlohmann::json& e = s.at("evaluation");
    return nlohmann::json{{"protocol", e.value("protocol", nlohmann::json(nullptr))},
                          {"data", e.value("data", nlohmann::json(nullptr))},
                          {"data_options", e.value("data_options", nlohmann::json(nullptr))},
                          {"precision", e.value("precision", nlohmann::json(nullptr))}};
  };
  if (measure(a) == measure(b)) return;
  const std::string diff = fmt::format("{}", fmt::join(json_differences(measure(b), measure(a)), "; "));
  QEVAL_CHECK(options.allow_protocol_mismatch,
              "{} and baseline {} were evaluated under different protocols, data or precision ({}); pass "
              "--allow-protocol-mismatch to check anyway", as, bs, diff);
  report.notes.push_back("protocol, data or precision differ (allowed): " + diff);
}

}  // namespace

CheckReport check_series_rules(const nlohmann::json& series, const nlohmann::json& baseline,
                               const nlohmann::json& rules_file, const std::string& rules_source,
                               const CheckOptions& options) {
  CheckReport report;
  report.baseline_source = baseline.is_null() ? "(the run's own checkpoints)" : options.baseline_source;
  report.current_source = options.current_source;
  QEVAL_CHECK(rules_file.is_object() && rules_file.contains("rules") && rules_file["rules"].is_array() &&
                  !rules_file["rules"].empty(),
              "{}: expected {{\"rules\": [ ... ]}} with at least one rule", rules_source);
  for (const auto& [k, v] : rules_file.items())
    QEVAL_CHECK(k == "rules" || k == "description", "{}: unknown key \"{}\" (expected rules, description)", rules_source, k);
  QEVAL_CHECK(!series.at("checkpoints").empty(), "{}: the series has no checkpoints", options.current_source);
  if (!baseline.is_null()) {
    QEVAL_CHECK(!baseline.at("checkpoints").empty(), "{}: the baseline series has no checkpoints", options.baseline_source);
    require_same_measurement(series, baseline, options.current_source, options.baseline_source, options, report);
  }
  std::vector<Rule> rules;
  for (std::size_t i = 0; i < rules_file["rules"].size(); ++i)
    rules.push_back(parse_rule(rules_file["rules"][i], fmt::format("{}: rules[{}]", rules_source, i)));
  for (const auto& rule : rules) {
    const auto& checkpoints = series.at("checkpoints");
    if (rule.at == "every") {
      for (const auto& e : checkpoints) judge_rule(rule, series, baseline, e, options.current_source, report);
    } else if (rule.at == "last") {
      judge_rule(rule, series, baseline, checkpoints.back(), options.current_source, report);
    } else {
      const std::int64_t step = *json_int64(rule.at);
      const nlohmann::json* e = entry_at(series, step);
      QEVAL_CHECK(e, "{}: rule {} is at step {}, which the series does not have", options.current_source, rule.text, step);
      judge_rule(rule, series, baseline, *e, options.current_source, report);
    }
  }
  return report;
}

CheckReport check_series_files(const std::filesystem::path& series_path, const std::filesystem::path& baseline_path,
                               const std::filesystem::path& tolerances_path, const CheckOptions& options) {
  const nlohmann::json series = read_verified_series_record(series_path);
  const nlohmann::json baseline =
      baseline_path.empty() ? nlohmann::json(nullptr) : read_verified_series_record(baseline_path);
  // The strict reader (common/strict_json.h): a rule or limit named twice is refused, never one of
  // them silently kept (issue 51).
  const nlohmann::json file = parse_json_strict(read_file(tolerances_path), tolerances_path.string());
  if (file.is_object() && file.contains("rules"))
    return check_series_rules(series, baseline, file, tolerances_path.string(), options);

  // A run against a baseline run, step by step, with the single-record check.
  QEVAL_CHECK(!baseline.is_null(), "{} is a series record and {} holds no \"rules\": give --baseline B.json (a series "
              "record) to check it step by step against, or a rules file (docs/ci-gate.md)", series_path.string(),
              tolerances_path.string());
  const Tolerances tolerances = Tolerances::from_json(file, tolerances_path.string());
  CheckReport report;
  report.baseline_source = options.baseline_source;
  report.current_source = options.current_source;
  require_same_measurement(series, baseline, options.current_source, options.baseline_source, options, report);
  std::size_t common = 0;
  for (const auto& e : series.at("checkpoints")) {
    const std::int64_t step = e.at("step").get<std::int64_t>();
    const nlohmann::json* b = entry_at(baseline, step);
    if (!b) {
      report.notes.push_back(fmt::format("step {}: not in the baseline, not checked", step));
      continue;
    }
    ++common;
    CheckOptions o = options;
    o.allow_protocol_mismatch = true;  // decided above, for the series as a whole
    o.baseline_source = fmt::format("{} step {}", options.baseline_source, step);
    o.current_source = fmt::format("{} step {}", options.current_source, step);
    const CheckReport r = check_record(read_series_checkpoint_record(baseline_path, *b),
                                       read_series_checkpoint_record(series_path, e), tolerances, o);
    for (CheckItem item : r.items) {
      item.scheme = fmt::format("step {} {}", step, item.scheme);
      report.items.push_back(item);
    }
    for (const auto& n : r.notes)
      if (n.rfind("protocol, data or precision differ", 0) != 0) report.notes.push_back(fmt::format("step {}: {}", step, n));
  }
  for (const auto& b : baseline.at("checkpoints"))
    if (!entry_at(series, b.at("step").get<std::int64_t>()))
      report.notes.push_back(fmt::format("step {}: only in the baseline, not checked", b.at("step").dump()));
  QEVAL_CHECK(common > 0, "{} and baseline {} have no step in common", options.current_source, options.baseline_source);
  return report;
}

}  // namespace qeval
