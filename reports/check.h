// `qeval check`: a regression gate for training CI. A new result record is held against a
// baseline record under a tolerance file; the caller maps the outcome to an exit status
// (0 within tolerance, 1 violations, 2 unusable input — every exit-2 condition throws qeval::Error).
//
// Tolerance file (JSON; unknown keys are errors, so a typo cannot silently disable a gate):
// {
//   "missing_scheme": "error" | "skip",        default "error": a scheme of the baseline that the
//                                               new record lacks is unusable input (exit 2)
//   "schemes": {                               per scheme name; "*" applies to every scheme of the
//     "*":           {"dppl_abs": 0.05, "dppl_rel": 0.25},     baseline not named explicitly
//     "full":        {"ppl_abs": 0.1, "ppl_rel": 0.02},
//     "int8-coarse": {"dppl_abs": 0.5, "required": false},
//     "int8-moderate": {"dppl_abs": 0.01, "band": 3},  fail only beyond 3 rounding bands and 0.01
//     "w4-zeropoint": {"kl": {"p99": {"abs": 0.05}, "max": {"rel": 0.5}}},  the per-token KL's tail
//   },                                         ("kl": by name "mean", "max", "p99.9" … "p0.1", "min"
//                                               (eval/percentiles.h); bounds its increase)                                         ("band" needs a baseline run with --rounding-band K)
//   "statistics_for": ["full"],                schemes whose statistics are checked (default: every
//                                               scheme that has statistics in the baseline)
//   "statistics": {                            by name, see statistic_names()
//     "kurtosis_rest":  {"abs": 0.5, "rel": 0.2, "direction": "increase"},
//     "first_attn_pct": {"abs": 5}
//   }
// }
// Quantities and limits. ΔPPL = PPL(scheme) − PPL(full) as the record states it (vs_full.dppl);
// "dppl_*" bound its increase, new ΔPPL − baseline ΔPPL; "ppl_*" bound the increase of the
// scheme's own PPL. A statistic's change is new − baseline ("increase"), baseline − new
// ("decrease") or |new − baseline| ("both", the default). With both "abs" and "rel" given the
// allowed change is max(abs, rel·|baseline|) (as pytest.approx): a change passes when it is
// within either limit; with one given, that one. A quantity with no limit is not checked.
// A statistic that is a number in the baseline and null (NaN) in the new record is a violation;
// one that is null in the baseline cannot be checked and is noted.
// The two records must agree on protocol, data and precision (comparison_identity + precision),
// and schemes of the same name on their resolved definitions, unless allow_protocol_mismatch: the
// model is what CI changes, not the measurement.
// Neither record is trusted (records/record_verify.h): each must agree with its own per-window rows
// (an edited summary is refused), hold only finite perplexities, and cover its protocol's windows
// unless allow_partial. A tolerance file must limit something, repeat no key, and match at least
// one quantity of the records: a gate that checked nothing is an error, never "PASS".
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace qeval {

struct Limit {
  std::optional<double> abs, rel;
  bool empty() const { return !abs && !rel; }
  double allowed(double baseline) const;  // max of the limits given
};

enum class Direction { increase, decrease, both };

struct SchemeTolerance {
  Limit dppl;                    // increase of ΔPPL vs full
  Limit ppl;                     // increase of the scheme's PPL
  std::optional<bool> required;  // overrides missing_scheme for this scheme
  // ΔPPL in rounding bands (records/rounding_band.h): a ΔPPL increase fails only beyond this many
  // of the baseline's bands (the standard deviation of ΔPPL over the scheme's rounding variants)
  // and beyond dppl's limit, when one is given.
  std::optional<double> band;
  // Per-token KL vs full precision (record: per_token.kl): "mean" or a percentile by its record
  // name, each bounding the increase new − baseline.
  std::map<std::string, Limit> kl;
};

struct StatisticTolerance {
  Limit limit;
  Direction direction = Direction::both;
};

struct Tolerances {
  std::string source = "tolerances";  // the file, for messages
  bool missing_scheme_is_error = true;
  std::map<std::string, SchemeTolerance> schemes;  // "*": default for schemes not named
  std::optional<std::vector<std::string>> statistics_for;
  std::map<std::string, StatisticTolerance> statistics;

  // Throws qeval::Error naming `source` and the offending key.
  static Tolerances from_json(const nlohmann::json& j, const std::string& source);
};
Tolerances load_tolerances(const std::filesystem::path& path);


struct CheckItem {
  std::string scheme;
  std::string quantity;  // "ΔPPL", "PPL", "KL p99" (a per-token KL quantity) or a statistic name
  nlohmann::json baseline, current;  // numbers, or null
  double change = 0;                 // in the checked direction (positive = worse)
  double allowed = 0;
  std::string rule;  // "abs 0.05, rel 25% of 0.12 = 0.03"
  bool violated = false;
};

struct CheckReport {
  std::string baseline_source, current_source;
  std::vector<CheckItem> items;
  std::vector<std::string> notes;  // skipped schemes, unchecked statistics, allowed mismatches
  std::size_t violations() const;
  bool passed() const { return violations() == 0; }
};

struct CheckOptions {
  bool allow_protocol_mismatch = false;  // also: schemes of one name defined differently
  std::string baseline_source = "baseline", current_source = "record";  // names in messages
  bool allow_partial = false;            // shards and partial merges (records/record_verify.h)
};

// Throws qeval::Error for unusable input: protocol/data/precision mismatch, a required scheme
// or statistic missing from the new record, a tolerance naming a scheme or statistic the
// baseline lacks, malformed records.
CheckReport check_record(const nlohmann::json& baseline, const nlohmann::json& current,
                         const Tolerances& tolerances, const CheckOptions& options = {});

// Every checked quantity in a table, then every violation on its own line, then a verdict.
std::string format_check_markdown(const CheckReport& report);
nlohmann::json check_report_to_json(const CheckReport& report);

}  // namespace qeval
