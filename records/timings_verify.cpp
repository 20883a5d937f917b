#include "records/timings_verify.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/phases.h"
#include "common/printable.h"

namespace qeval {
namespace {

using nlohmann::json;

// The phases adding up to the total, the schemes' seconds within their phase: 1 % (and a
// nanosecond for totals of nothing) forgives a printer that rounds.
bool within_one_percent(double part, double whole) { return part <= whole * 1.01 + 1e-9; }

// A measured time: a finite number of seconds, ≥ 0, below kMaxRecordSeconds.
double seconds(const json& v, const std::string& what) {
  QEVAL_CHECK(v.is_number(), "{} is {}: expected a number of seconds", what, json_text(v, 60));
  const double s = v.get<double>();
  QEVAL_CHECK(std::isfinite(s) && s >= 0 && s < kMaxRecordSeconds,
              "{} is {}: a measured time is a finite number of seconds, at least 0 and below {:g}", what, s,
              kMaxRecordSeconds);
  return s;
}

const json& object_member(const json& j, const char* key, const std::string& where) {
  QEVAL_CHECK(j.contains(key) && j[key].is_object(), "{}.{} should be an object, found {}", where, key,
              j.contains(key) ? json_text(j[key], 60) : std::string("nothing"));
  return j[key];
}

void verify_phase_timings(const json& timings, const std::vector<std::string>& scheme_names, const std::string& source) {
  const std::string where = source + ": timings";
  QEVAL_CHECK(timings.is_object(), "{} should be an object, found {}", where, json_text(timings, 60));
  QEVAL_CHECK(timings.contains("total_s"), "{} lacks \"total_s\"", where);
  const double total = seconds(timings["total_s"], where + ".total_s");
  std::map<std::string, double> phase;  // every phase qeval measures, 0 where the record has none
  for (std::size_t i = 0; i < kPhaseCount; ++i) phase[phase_name(static_cast<Phase>(i))] = 0;
  const json& phases = object_member(timings, "phases", where);
  double sum = 0;
  for (const auto& [name, value] : phases.items()) {
    QEVAL_CHECK(phase.count(name), "{}.phases has \"{}\", which is no phase qeval measures", where, name);
    sum += phase[name] = seconds(value, fmt::format("{}.phases.{}", where, name));
  }
  QEVAL_CHECK(within_one_percent(sum, total) && within_one_percent(total, sum),
              "{}.total_s is {}, but its phases add up to {}: the phases of a run add up to its total (within 1 %)", where,
              total, sum);

  const json& schemes = object_member(timings, "schemes", where);
  const std::set<std::string> names(scheme_names.begin(), scheme_names.end());
  for (const auto& [name, value] : schemes.items())
    QEVAL_CHECK(names.count(name), "{}.schemes has {}, which is no scheme of the record", where, in_quotes(name));
  std::map<std::string, double> by_phase;  // the schemes' seconds, summed per phase
  for (const std::string& name : scheme_names) {
    const std::string at = fmt::format("{}.schemes.{}", where, name);
    QEVAL_CHECK(schemes.contains(name) && schemes[name].is_object(), "{} should be an object of phase seconds, found {}",
                at, schemes.contains(name) ? json_text(schemes[name], 60) : std::string("nothing"));
    for (const auto& [p, value] : schemes[name].items()) {
      QEVAL_CHECK(p == "quantize" || p == "forward" || p == "statistics" || p == "head" || p == "read" || p == "convert",
                  "{} has \"{}\": a scheme's phases are quantize, forward, statistics, head, and read and convert (an "
                  "artifact's own checkpoint)", at, p);
      by_phase[p] += seconds(value, at + "." + p);
    }
  }
  for (const auto& [p, s] : by_phase)
    QEVAL_CHECK(within_one_percent(s, phase[p]),
                "{}.schemes spend {} s in {}, but the run's {} phase took {} s: a scheme's phases lie within the run's",
                where, s, p, p, phase[p]);
}

// Each scheme's throughput: every scheme runs every window, so tokens per second × forward seconds
// is one count of tokens.
void verify_scheme_timing(const json& schemes, const std::string& source) {
  double tokens = -1;
  std::string tokens_from;
  for (const json& s : schemes) {
    if (!s.contains("timing")) continue;
    const std::string name = s.at("name").get<std::string>();
    const std::string where = fmt::format("{}: scheme {}: timing", source, name);
    const json& t = s["timing"];
    QEVAL_CHECK(t.is_object(), "{} should be an object, found {}", where, json_text(t, 60));
    if (!t.contains("forward_seconds") || !t.contains("tokens_per_second")) continue;
    const double forward = seconds(t["forward_seconds"], where + ".forward_seconds");
    const json& rate = t["tokens_per_second"];
    QEVAL_CHECK(rate.is_number() && std::isfinite(rate.get<double>()) && rate.get<double>() >= 0,
                "{}.tokens_per_second is {}: expected a finite number ≥ 0", where, json_text(rate, 60));
    QEVAL_CHECK((forward > 0) == (rate.get<double>() > 0),
                "{}.tokens_per_second is {} for forward_seconds {}: a rate is tokens over a time that passed", where,
                rate.get<double>(), forward);
    if (forward == 0) continue;
    const double n = rate.get<double>() * forward;
    if (tokens < 0) {
      tokens = n;
      tokens_from = name;
    }
    QEVAL_CHECK(std::fabs(n - tokens) <= 1e-6 * std::max(1.0, tokens),
                "{}: tokens_per_second × forward_seconds is {:.6g} tokens, but scheme {} ran {:.6g}: every scheme runs "
                "the same windows", where, n, tokens_from, tokens);
  }
}

}  // namespace

void verify_timings(const json& record, const std::string& source) {
  std::vector<std::string> names;
  for (const json& s : record.at("schemes")) names.push_back(s.at("name").get<std::string>());
  if (record.contains("timing")) {
    const json& t = record["timing"];
    QEVAL_CHECK(t.is_object(), "{}: timing should be an object, found {}", source, json_text(t, 60));
    if (t.contains("total_seconds")) seconds(t["total_seconds"], source + ": timing.total_seconds");
  }
  verify_scheme_timing(record.at("schemes"), source);
  if (record.contains("timings") && !record["timings"].is_null()) verify_phase_timings(record["timings"], names, source);
}

}  // namespace qeval
