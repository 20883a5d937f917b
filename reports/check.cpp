#include "reports/check.h"

#include "records/rounding_band.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "common/printable.h"
#include "common/error.h"
#include "common/files.h"
#include "common/strict_json.h"
#include "eval/percentiles.h"
#include "reports/compare.h"
#include "records/record.h"
#include "records/record_verify.h"

namespace qeval {
namespace {

void require_keys(const nlohmann::json& j, const std::set<std::string>& allowed, const std::string& where) {
  QEVAL_CHECK(j.is_object(), "{}: expected a JSON object, found {}", where, j.type_name());
  for (const auto& [key, value] : j.items())
    QEVAL_CHECK(allowed.count(key), "{}: unknown key \"{}\" (expected one of: {})", where, key,
                fmt::join(allowed, ", "));
}

std::optional<double> non_negative(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return std::nullopt;
  QEVAL_CHECK(j[key].is_number(), "{}: \"{}\" should be a number, found {}", where, key, j[key].dump());
  double v = j[key].get<double>();
  QEVAL_CHECK(std::isfinite(v) && v >= 0, "{}: \"{}\" should be a finite number >= 0, found {}", where, key, v);
  return v;
}

const nlohmann::json* find_scheme(const nlohmann::json& record, const std::string& name) {
  for (const auto& s : record.at("schemes"))
    if (s.at("name") == name) return &s;
  return nullptr;
}

nlohmann::json statistic_value(const nlohmann::json& summary, const std::vector<std::string>& path) {
  const nlohmann::json* at = &summary;
  for (const auto& key : path) {
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
  }
  return *at;
}

std::string number(const nlohmann::json& v) { return v.is_number() ? fmt::format("{:.6g}", v.get<double>()) : "null"; }

std::string rule_text(const Limit& limit, double baseline) {
  std::vector<std::string> parts;
  if (limit.abs) parts.push_back(fmt::format("abs {:.6g}", *limit.abs));
  if (limit.rel)
    parts.push_back(fmt::format("rel {:.6g}% of {:.6g} = {:.6g}", 100 * *limit.rel, std::fabs(baseline),
                                *limit.rel * std::fabs(baseline)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// One quantity against its limit; `sign` +1: an increase is bad, -1: a decrease, 0: either.
CheckItem judge(const std::string& scheme, const std::string& quantity, const nlohmann::json& baseline,
                const nlohmann::json& current, const Limit& limit, Direction direction) {
  CheckItem item;
  item.scheme = scheme;
  item.quantity = quantity;
  item.baseline = baseline;
  item.current = current;
  const double b = baseline.get<double>();
  item.allowed = limit.allowed(b);
  item.rule = rule_text(limit, b);
  if (!current.is_number()) {  // became NaN (or was written as null): never within a tolerance
    item.violated = true;
    item.change = std::nan("");
    return item;
  }
  const double c = current.get<double>();
  switch (direction) {
    case Direction::increase: item.change = c - b; break;
    case Direction::decrease: item.change = b - c; break;
    case Direction::both: item.change = std::fabs(c - b); break;
  }
  item.violated = !(item.change <= item.allowed);
  return item;
}

Direction parse_direction(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("direction")) return Direction::both;
  const std::string d = j["direction"].is_string() ? j["direction"].get<std::string>() : j["direction"].dump();
  if (d == "increase") return Direction::increase;
  if (d == "decrease") return Direction::decrease;
  if (d == "both") return Direction::both;
  fail("{}: \"direction\" should be increase, decrease or both, found {}", where, d);
}

}  // namespace

double Limit::allowed(double baseline) const {
  double a = -INFINITY;
  if (abs) a = std::max(a, *abs);
  if (rel) a = std::max(a, *rel * std::fabs(baseline));
  return a;
}


Tolerances Tolerances::from_json(const nlohmann::json& j, const std::string& source) {
  Tolerances t;
  t.source = source;
  require_keys(j, {"description", "missing_scheme", "schemes", "statistics_for", "statistics"}, source);
  if (j.contains("missing_scheme")) {
    const auto& m = j["missing_scheme"];
    QEVAL_CHECK(m == "error" || m == "skip", "{}: \"missing_scheme\" should be \"error\" or \"skip\", found {}", source,
                m.dump());
    t.missing_scheme_is_error = m == "error";
  }
  if (j.contains("schemes")) {
    QEVAL_CHECK(j["schemes"].is_object(), "{}: \"schemes\" should be an object keyed by scheme name", source);
    for (const auto& [name, entry] : j["schemes"].items()) {
      const std::string where = fmt::format("{}: schemes.{}", source, name);
      require_keys(entry, {"dppl_abs", "dppl_rel", "ppl_abs", "ppl_rel", "required", "band", "kl"}, where);
      SchemeTolerance s;
      s.dppl = {non_negative(entry, "dppl_abs", where), non_negative(entry, "dppl_rel", where)};
      s.ppl = {non_negative(entry, "ppl_abs", where), non_negative(entry, "ppl_rel", where)};
      s.band = non_negative(entry, "band", where);
      QEVAL_CHECK(!s.band || *s.band > 0, "{}: \"band\" should be a number of bands > 0, found 0", where);
      if (entry.contains("required")) {
        QEVAL_CHECK(entry["required"].is_boolean(), "{}: \"required\" should be true or false", where);
        s.required = entry["required"].get<bool>();
      }
      if (entry.contains("kl")) {
        std::set<std::string> known = {"mean", "max", "min"};
        for (const PercentileLevel& l : percentile_levels()) known.insert(l.name);
        QEVAL_CHECK(entry["kl"].is_object() && !entry["kl"].empty(),
                    "{}: \"kl\" should be an object of limits by name (\"p99\": {{\"abs\": 0.05}})", where);
        require_keys(entry["kl"], known, where + ".kl");
        for (const auto& [q, limit] : entry["kl"].items()) {
          const std::string at = where + ".kl." + q;
          require_keys(limit, {"abs", "rel"}, at);
          Limit l{non_negative(limit, "abs", at), non_negative(limit, "rel", at)};
          QEVAL_CHECK(!l.empty(), "{}: give \"abs\" and/or \"rel\"", at);
          s.kl[q] = l;
        }
      }
      t.schemes[name] = s;
    }
  }
  if (j.contains("statistics_for")) {
    const auto& f = j["statistics_for"];
    QEVAL_CHECK(f.is_array() && std::all_of(f.begin(), f.end(), [](const auto& x) { return x.is_string(); }),
                "{}: \"statistics_for\" should be a list of scheme names", source);
    t.statistics_for = f.get<std::vector<std::string>>();
  }
  if (j.contains("statistics")) {
    std::set<std::string> known;
    for (const auto& [name, path] : statistic_names()) known.insert(name);
    require_keys(j["statistics"], known, source + ": statistics");
    for (const auto& [name, entry] : j["statistics"].items()) {
      const std::string where = fmt::format("{}: statistics.{}", source, name);
      require_keys(entry, {"abs", "rel", "direction"}, where);
      StatisticTolerance s;
      s.limit = {non_negative(entry, "abs", where), non_negative(entry, "rel", where)};
      QEVAL_CHECK(!s.limit.empty(), "{}: give \"abs\" and/or \"rel\"", where);
      s.direction = parse_direction(entry, where);
      t.statistics[name] = s;
    }
  }
  // A gate that limits nothing passes every record: refuse it rather than print "PASS".
  const bool limits_something =
      !t.statistics.empty() ||
      std::any_of(t.schemes.begin(), t.schemes.end(), [](const auto& s) {
        return !s.second.dppl.empty() || !s.second.ppl.empty() || !s.second.kl.empty();
      });
  QEVAL_CHECK(limits_something, "{}: the tolerance file limits nothing (no dppl_abs / dppl_rel / ppl_abs / ppl_rel for any "
              "scheme, no statistics): a gate that checks nothing always passes", source);
  return t;
}

Tolerances load_tolerances(const std::filesystem::path& path) {
  // A key given twice would gate on one of its values only: refused (common/strict_json.h).
  return Tolerances::from_json(parse_json_strict(read_file(path), path.string() + " (tolerance file)"), path.string());
}

std::size_t CheckReport::violations() const {
  return static_cast<std::size_t>(std::count_if(items.begin(), items.end(), [](const auto& i) { return i.violated; }));
}

CheckReport check_record(const nlohmann::json& baseline, const nlohmann::json& current, const Tolerances& tolerances,
                         const CheckOptions& options) {
  CheckReport report;
  report.baseline_source = options.baseline_source;
  report.current_source = options.current_source;
  const std::string& bs = options.baseline_source;
  const std::string& cs = options.current_source;

  // Neither record is trusted: each must agree with its own per-window rows, and cover its
  // protocol's windows unless partial records are allowed (records/record_verify.h).
  for (const auto& note : require_verified_record(baseline, bs, options.allow_partial)) report.notes.push_back(note);
  for (const auto& note : require_verified_record(current, cs, options.allow_partial)) report.notes.push_back(note);

  // The measurement must be the same; only the model may change.
  nlohmann::json bid = comparison_identity(baseline), cid = comparison_identity(current);
  bid["precision"] = precision_identity(baseline.value("precision", nlohmann::json(nullptr)));
  cid["precision"] = precision_identity(current.value("precision", nlohmann::json(nullptr)));
  if (bid != cid) {
    const std::string diff = fmt::format("{}", fmt::join(json_differences(bid, cid), "; "));
    QEVAL_CHECK(options.allow_protocol_mismatch,
                "{} and baseline {} were evaluated under different protocols, data or precision ({}); pass "
                "--allow-protocol-mismatch to check anyway",
                cs, bs, diff);
    report.notes.push_back("protocol, data or precision differ (allowed): " + diff);
  }
  // A scheme is its definition, not its name: a spec file that calls itself int8-coarse is gated
  // against the baseline's int8-coarse only when it quantises the same way.
  if (const auto differ = scheme_definition_differences(baseline, current); !differ.empty()) {
    const std::string diff = fmt::format("{}", fmt::join(differ, "; "));
    QEVAL_CHECK(options.allow_protocol_mismatch,
                "{} and baseline {} name the same schemes but define them differently ({}); pass "
                "--allow-protocol-mismatch to check anyway",
                cs, bs, diff);
    report.notes.push_back("scheme definitions differ (allowed): " + diff);
  }

  try {
    QEVAL_CHECK(baseline.at("schemes").is_array() && current.at("schemes").is_array(), "\"schemes\" should be a list");
    // A tolerance that names a scheme the baseline lacks would gate nothing: the pairing is wrong.
    for (const auto& [name, tol] : tolerances.schemes)
      QEVAL_CHECK(name == "*" || find_scheme(baseline, name), "{}: tolerances name scheme '{}' but baseline {} has no such scheme",
                  tolerances.source, name, bs);

    for (const auto& b : baseline.at("schemes")) {
      if (is_rounding_variant(b)) continue;  // part of its scheme's band, not a scheme to gate
      const std::string name = b.at("name").get<std::string>();
      auto tol_it = tolerances.schemes.find(name);
      if (tol_it == tolerances.schemes.end()) tol_it = tolerances.schemes.find("*");
      const nlohmann::json* c = find_scheme(current, name);
      if (!c) {
        bool required = tolerances.missing_scheme_is_error;
        if (tol_it != tolerances.schemes.end() && tol_it->second.required) required = *tol_it->second.required;
        QEVAL_CHECK(!required, "{} has no scheme '{}', which baseline {} has (rerun with it, or set \"missing_scheme\": "
                    "\"skip\" or \"required\": false in the tolerance file)", cs, name, bs);
        report.notes.push_back(fmt::format("scheme {} is missing from {}: skipped", name, cs));
        continue;
      }
      if (tol_it == tolerances.schemes.end()) {
        report.notes.push_back(fmt::format("scheme {}: no tolerance given, not checked", name));
        continue;
      }
      const SchemeTolerance& t = tol_it->second;
      if (!t.ppl.empty())
        report.items.push_back(judge(name, "PPL", b.at("perplexity").at("ppl"), c->at("perplexity").at("ppl"), t.ppl,
                                     Direction::increase));
      if (!t.dppl.empty() || t.band) {
        CheckItem item = judge(name, "ΔPPL", b.at("vs_full").at("dppl"), c->at("vs_full").at("dppl"), t.dppl,
                               Direction::increase);
        if (t.band) {
          // The band is recomputed from the baseline's variant entries (verified like every scheme).
          const std::optional<RoundingBand> band = rounding_band(baseline, name);
          QEVAL_CHECK(band.has_value(), "{}: schemes.{} limits ΔPPL in rounding bands (\"band\": {}), but baseline {} has "
                      "no rounding band for it; evaluate the baseline with --rounding-band K (docs/ci-gate.md)",
                      tolerances.source, name, *t.band, bs);
          const double width = *t.band * band->dppl_sd;
          item.allowed = t.dppl.empty() ? width : std::max(item.allowed, width);
          item.rule = (t.dppl.empty() ? std::string() : item.rule + "; ") +
                      fmt::format("{} × band {:.4g} = {:.4g} (σ of ΔPPL over {} rounding variants)", *t.band,
                                  band->dppl_sd, width, band->variants);
          item.violated = !(item.change <= item.allowed);
        }
        report.items.push_back(item);
      }
      // The per-token KL's mean or a percentile, from each record's per_token section (full
      // precision, the first scheme, has none: it is what the others are held to).
      const bool is_full = &b == &baseline.at("schemes").front();
      if (is_full && !t.kl.empty()) report.notes.push_back(fmt::format("scheme {}: full precision has no per-token KL", name));
      for (const auto& [quantity, limit] : t.kl) {
        if (is_full) break;
        const std::string& q = quantity;  // a structured binding is not capturable before C++20 (clang)
        auto kl_value = [&](const nlohmann::json& scheme, const std::string& source) -> nlohmann::json {
          const nlohmann::json* kl = scheme.contains("per_token") ? &scheme["per_token"]["kl"] : nullptr;
          if (kl && q == "mean") return kl->at("mean");
          const bool has = kl && kl->contains("percentiles");
          QEVAL_CHECK(has, "{}: schemes.{} limits the per-token KL's {}, but {}'s scheme {} has no per-token KL "
                      "percentiles (a record written before them, or a merge without the shards' values)",
                      tolerances.source, name, q, source, name);
          return kl->at("percentiles").at(q);
        };
        report.items.push_back(judge(name, "KL " + q, kl_value(b, bs), kl_value(*c, cs), limit, Direction::increase));
      }
    }
    for (const auto& c : current.at("schemes"))
      if (!is_rounding_variant(c) && !find_scheme(baseline, c.at("name").get<std::string>()))
        report.notes.push_back(fmt::format("scheme {} is not in the baseline: not checked", c.at("name").get<std::string>()));

    if (!tolerances.statistics.empty()) {
      std::vector<std::string> names;
      if (tolerances.statistics_for) {
        names = *tolerances.statistics_for;
        for (const auto& n : names) {
          const nlohmann::json* b = find_scheme(baseline, n);
          QEVAL_CHECK(b && b->at("statistics").is_object(), "\"statistics_for\" names '{}' but baseline {} has no "
                      "statistics for it", n, bs);
        }
      } else {
        for (const auto& b : baseline.at("schemes"))
          if (b.at("statistics").is_object()) names.push_back(b.at("name").get<std::string>());
        QEVAL_CHECK(!names.empty(), "the tolerance file limits statistics but baseline {} has none (evaluate it with "
                    "--stats-for full or all)", bs);
      }
      for (const auto& name : names) {
        const nlohmann::json& bst = find_scheme(baseline, name)->at("statistics");
        const nlohmann::json* c = find_scheme(current, name);
        if (!c) continue;  // reported (or refused) above
        const nlohmann::json& cst = c->at("statistics");
        QEVAL_CHECK(cst.is_object(), "{} has no statistics for scheme '{}', which baseline {} has (evaluate with "
                    "--stats-for {})", cs, name, bs, name == "full" ? "full" : "all");
        for (const auto& [stat, path] : statistic_names()) {
          auto it = tolerances.statistics.find(stat);
          if (it == tolerances.statistics.end()) continue;
          const nlohmann::json bv = statistic_value(bst, path);
          QEVAL_CHECK(!bv.is_null() || bst.contains(path.front()),
                      "the tolerance file limits {} but baseline {} did not collect {} statistics", stat, bs, path.front());
          if (!bv.is_number()) {
            report.notes.push_back(fmt::format("{} {}: null in the baseline, not checked", name, stat));
            continue;
          }
          QEVAL_CHECK(cst.contains(path.front()), "{} did not collect {} statistics for scheme '{}' (needed for {}); the "
                      "baseline did", cs, path.front(), name, stat);
          report.items.push_back(judge(name, stat, bv, statistic_value(cst, path), it->second.limit,
                                       it->second.direction));
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    fail("check {} against {}: a record lacks a field it needs: {}", cs, bs, e.what());
  }
  // Limits that matched nothing in these records (every limited scheme skipped) gate nothing.
  QEVAL_CHECK(!report.items.empty(), "check {} against {}: nothing was checked (the tolerance file's limits match no "
              "scheme or statistic both records have){}", cs, bs,
              report.notes.empty() ? std::string() : fmt::format("; {}", fmt::join(report.notes, "; ")));
  return report;
}

std::string format_check_markdown(const CheckReport& report) {
  std::string out = fmt::format("qeval check: {} against baseline {}\n\n", report.current_source, report.baseline_source);
  out += "| scheme | quantity | baseline | new | worse by | allowed | limit | result |\n"
         "|---|---|---:|---:|---:|---:|---|---|\n";
  for (const auto& i : report.items)
    out += fmt::format("| {} | {} | {} | {} | {} | {:.6g} | {} | {} |\n", markdown_cell(i.scheme), markdown_cell(i.quantity),
                       number(i.baseline),
                       number(i.current), std::isnan(i.change) ? "—" : fmt::format("{:+.6g}", i.change), i.allowed,
                       markdown_cell(i.rule), i.violated ? "**FAIL**" : "ok");
  if (!report.notes.empty()) {
    out += "\n";
    for (const auto& n : report.notes) out += "- note: " + n + "\n";
  }
  const std::size_t v = report.violations();
  out += "\n";
  if (v == 0) return out + fmt::format("PASS: {} quantities within tolerance\n", report.items.size());
  out += fmt::format("FAIL: {} of {} quantities outside tolerance\n", v, report.items.size());
  for (const auto& i : report.items) {
    if (!i.violated) continue;
    if (!i.current.is_number())
      out += fmt::format("- {} {}: baseline {}, new {} (not a number), allowed {:.6g}\n", i.scheme, i.quantity,
                         number(i.baseline), number(i.current), i.allowed);
    else
      out += fmt::format("- {} {}: baseline {}, new {}, worse by {:.6g}, allowed {:.6g} ({})\n", i.scheme, i.quantity,
                         number(i.baseline), number(i.current), i.change, i.allowed, i.rule);
  }
  return out;
}

nlohmann::json check_report_to_json(const CheckReport& report) {
  nlohmann::json items = nlohmann::json::array();
  for (const auto& i : report.items)
    items.push_back({{"scheme", i.scheme},
                     {"quantity", i.quantity},
                     {"baseline", i.baseline},
                     {"new", i.current},
                     {"worse_by", std::isnan(i.change) ? nlohmann::json(nullptr) : nlohmann::json(i.change)},
                     {"allowed", i.allowed},
                     {"limit", i.rule},
                     {"violated", i.violated}});
  return {{"baseline", report.baseline_source},
          {"record", report.current_source},
          {"passed", report.passed()},
          {"violations", report.violations()},
          {"items", items},
          {"notes", report.notes}};
}

}  // namespace qeval
