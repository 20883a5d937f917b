#include "records/record_verify.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "common/error.h"
#include "common/hash.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "common/json_diff.h"
#include "eval/evaluator.h"
#include "records/rounding_band.h"
#include "records/run_state.h"
#include "records/scheme_sections_verify.h"
#include "records/statistics_verify.h"
#include "records/timings_verify.h"
#include "stats/statistics.h"
#include "records/window_rows.h"
#include "eval/fidelity_summary.h"
#include "eval/position_buckets.h"

namespace qeval {
namespace {

using Rows = std::map<std::int64_t, WindowScores>;

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where) {
  QEVAL_CHECK(j.is_object() && j.contains(key), "{}: has no \"{}\"", where, key);
  return j[key];
}

// A string member, its key named when it is something else ("r.json: protocol: \"name\" is 5: expected a string").
std::string string_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& v = field(j, key, where);
  QEVAL_CHECK(v.is_string(), "{}: \"{}\" is {}: expected a string", where, key, json_text(v, 60));
  return v.get<std::string>();
}

std::int64_t integer_field(const nlohmann::json& j, const char* key, const std::string& where) {
  return json_integer(field(j, key, where), fmt::format("{}: \"{}\"", where, key));
}

// A summary number written by qeval against the one recomputed: equal to 1e-9 relative (the same
// code gives the same bits; the slack only forgives a printer that rounds the last digit).
void same_number(const nlohmann::json& written, double recomputed, const std::string& what, const std::string& source) {
  QEVAL_CHECK(std::isfinite(recomputed), "{}: {} recomputed from the per-window rows is {}: not a finite number",
              source, what, recomputed);
  QEVAL_CHECK(written.is_number(), "{}: {} is {}, but the per-window rows give {}", source, what, json_text(written),
              recomputed);
  const double w = written.get<double>();
  QEVAL_CHECK(std::fabs(w - recomputed) <= 1e-9 * std::max(1.0, std::fabs(recomputed)),
              "{}: {} is {}, but the per-window rows give {}: the summary was changed after qeval wrote it", source,
              what, w, recomputed);
}

Rows read_rows(const nlohmann::json& scheme, const std::string& name, std::int64_t max_tokens, bool full,
               const std::string& source) {
  const nlohmann::json& rows = field(scheme, "per_window", fmt::format("{}: scheme {}", source, name));
  QEVAL_CHECK(rows.is_object(), "{}: scheme {}: \"per_window\" should be an object of window rows", source, name);
  return checked_window_rows(rows, max_tokens, full, fmt::format("{}: scheme {}", source, name));
}

// What each window of the protocol scores, for the protocols that fix it.
void check_scored_per_window(const nlohmann::json& protocol, const Rows& rows, const std::string& source) {
  const std::string name = string_field(protocol, "name", source + ": protocol");
  const std::int64_t seq_len = integer_field(protocol, "seq_len", source + ": protocol");
  std::int64_t lo = 1, hi = seq_len - 1;
  if (name == "windows" || name == "gptq-c4") lo = hi = seq_len - 1;
  if (name == "llamacpp") lo = hi = seq_len - seq_len / 2 - 1;
  for (const auto& [index, row] : rows)
    QEVAL_CHECK(row.tokens >= lo && row.tokens <= hi, "{}: window {} scores {} tokens; protocol {} with seq_len {} scores {}",
                source, index, row.tokens, name, seq_len, lo == hi ? std::to_string(lo) : fmt::format("{}..{}", lo, hi));
}

void check_summary(const nlohmann::json& scheme, const std::string& name, const SchemeSummary& s,
                   const SchemeSummary& full, const StatisticsShape& shape, const std::string& source) {
  const std::string where = fmt::format("{}: scheme {}", source, name);
  const nlohmann::json& p = field(scheme, "perplexity", where);
  QEVAL_CHECK(integer_field(p, "windows", where + ": perplexity") == s.windows &&
                  integer_field(p, "tokens", where + ": perplexity") == s.tokens,
              "{}: perplexity says {} windows and {} tokens, the per-window rows hold {} and {}", where,
              json_text(p["windows"]), json_text(p["tokens"]), s.windows, s.tokens);
  const std::string pp = "scheme " + name + " perplexity.";
  same_number(field(p, "ppl", where), s.ppl, pp + "ppl", source);
  same_number(field(p, "nll_mean", where), s.nll_mean, pp + "nll_mean", source);
  same_number(field(p, "nll_se", where), s.nll_se, pp + "nll_se", source);
  same_number(field(p, "ppl_pm", where), s.ppl * s.nll_se, pp + "ppl_pm", source);
  const nlohmann::json& ci = field(p, "ppl_ci95", where);
  QEVAL_CHECK(ci.is_array() && ci.size() == 2, "{}: perplexity.ppl_ci95 should be [low, high]", where);
  same_number(ci[0], s.ppl_low, pp + "ppl_ci95[0]", source);
  same_number(ci[1], s.ppl_high, pp + "ppl_ci95[1]", source);
  const nlohmann::json& v = field(scheme, "vs_full", where);
  const std::string vp = "scheme " + name + " vs_full.";
  same_number(field(v, "dppl", where), s.ppl - full.ppl, vp + "dppl", source);
  same_number(field(v, "dppl_rel", where), full.ppl > 0 ? (s.ppl - full.ppl) / full.ppl : 0.0, vp + "dppl_rel", source);
  same_number(field(v, "paired_dnll_mean", where), s.diff_mean, vp + "paired_dnll_mean", source);
  same_number(field(v, "paired_dnll_se", where), s.diff_se, vp + "paired_dnll_se", source);
  same_number(field(v, "kl_mean", where), s.kl_mean, vp + "kl_mean", source);
  same_number(field(v, "top1_agreement", where), s.top1_agreement, vp + "top1_agreement", source);
  same_number(field(v, "dp_correct_mean", where), s.dp_mean, vp + "dp_correct_mean", source);
  const nlohmann::json& st = field(scheme, "statistics", where);
  if (st.is_object() && st.contains("windows"))
    QEVAL_CHECK(json_integer(st["windows"], where + ": statistics.windows") == s.windows,
                "{}: statistics cover {} windows, the perplexity {}: they must be the same windows", where,
                json_text(st["windows"]), s.windows);
  if (st.is_object()) verify_statistics_summary(st, shape, where);
}

// The sections beyond the mean (eval/fidelity_summary.h, eval/position_buckets.h): their numbers
// are the rows' where the rows give them; the percentiles (from per-token values a record does not
// hold) must count the scheme's tokens and rise from min to max.
void check_tails(const nlohmann::json& scheme, const std::string& name, const Rows& rows, const std::string& source) {
  const std::string where = fmt::format("{}: scheme {}", source, name);
  const auto tails = summarize_fidelity(rows);
  if (scheme.contains("per_token")) {
    QEVAL_CHECK(tails.has_value(), "{}: \"per_token\" is there but the rows have no tails to give it", where);
    const nlohmann::json& t = scheme["per_token"];
    const std::string tp = "scheme " + name + " per_token.";
    same_number(field(field(t, "kl", where), "mean", where), tails->kl.value, tp + "kl.mean", source);
    same_number(field(field(t, "reverse_kl", where), "mean", where), tails->reverse_kl.value, tp + "reverse_kl.mean", source);
    same_number(field(field(t, "dp", where), "mean", where), tails->dp.value, tp + "dp.mean", source);
    same_number(field(field(t, "dp_rms", where), "value", where), tails->dp_rms.value, tp + "dp_rms.value", source);
    same_number(field(field(t, "same_top", where), "rate", where), tails->same_top.value, tp + "same_top.rate", source);
    const nlohmann::json& flips = field(t, "top1_flips", where);
    QEVAL_CHECK(integer_field(field(flips, "lost", where), "count", where) == tails->lost &&
                    integer_field(field(flips, "gained", where), "count", where) == tails->gained,
                "{}: per_token.top1_flips says lost {}, gained {}; the rows give {} and {}", where,
                json_text(flips["lost"]["count"]), json_text(flips["gained"]["count"]), tails->lost, tails->gained);
    for (const char* q : {"kl", "dp"}) {
      if (!t[q].contains("percentiles")) continue;
      const Distribution d = Distribution::from_json(t[q]["percentiles"], fmt::format("{}: per_token.{}.percentiles", where, q));
      QEVAL_CHECK(d.count == tails->tokens, "{}: per_token.{}.percentiles count {} tokens, the rows {}", where, q, d.count,
                  tails->tokens);
      std::vector<double> ascending = {d.min};
      for (auto it = d.at.rbegin(); it != d.at.rend(); ++it) ascending.push_back(*it);
      ascending.push_back(d.max);
      QEVAL_CHECK(std::is_sorted(ascending.begin(), ascending.end()),
                  "{}: per_token.{}.percentiles do not rise from min to max: not a distribution", where, q);
    }
  }
  if (scheme.contains("position_buckets")) {
    const auto buckets = summarize_buckets(rows);
    const nlohmann::json& b = scheme["position_buckets"];
    QEVAL_CHECK(b.is_array() && b.size() == buckets.size(), "{}: position_buckets should list {} buckets, found {}", where,
                buckets.size(), json_text(b));
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      const std::string bp = fmt::format("scheme {} position_buckets[{}].", name, k);
      QEVAL_CHECK(integer_field(b[k], "tokens", where) == buckets[k].tokens, "{}: {}tokens is {}, the rows give {}", where,
                  bp, json_text(b[k]["tokens"]), buckets[k].tokens);
      same_number(field(b[k], "paired_dnll_mean", where), buckets[k].diff_mean, bp + "paired_dnll_mean", source);
      same_number(field(b[k], "paired_dnll_se", where), buckets[k].diff_se, bp + "paired_dnll_se", source);
      same_number(field(b[k], "kl_mean", where), buckets[k].kl_mean, bp + "kl_mean", source);
    }
  }
}

// A shard record: its windows are its own, its state is its rows, and (when it says how many
// windows the protocol gave) it holds every one of its windows.
std::string check_shard(const nlohmann::json& record, const std::vector<Rows>& rows, const std::string& source) {
  const nlohmann::json& sh = record["shard"];
  const std::string where = source + ": shard";
  const std::int64_t index = integer_field(sh, "index", where), count = integer_field(sh, "count", where);
  QEVAL_CHECK(count >= 2 && index >= 0 && index < count, "{}: shard {}/{}: expected i/n with n >= 2 and 0 <= i < n",
              source, index, count);
  for (const auto& [w, row] : rows.front())
    QEVAL_CHECK(w % count == index, "{}: window {} is not one of shard {}/{}'s windows (index % {} == {})", source, w,
                index, count, count, index);
  if (sh.contains("protocol_windows")) {
    const std::int64_t total = integer_field(sh, "protocol_windows", where);
    std::set<std::int64_t> members;
    if (sh.contains("protocol_window_indices")) {
      for (const auto& i : field(sh, "protocol_window_indices", where))
        if (const std::int64_t w = json_integer(i, where + ": protocol_window_indices"); w % count == index) members.insert(w);
    } else {
      for (std::int64_t w = index; w < total; w += count) members.insert(w);
    }
    for (std::int64_t w : members)
      QEVAL_CHECK(rows.front().count(w), "{}: shard {}/{} lacks window {} (the protocol gave {} windows)", source, index,
                  count, w, total);
    QEVAL_CHECK(rows.front().size() == members.size(), "{}: shard {}/{} holds {} windows, the protocol gave it {}",
                source, index, count, rows.front().size(), members.size());
  }
  // The state merge rebuilds from must be these very rows.
  std::vector<std::shared_ptr<StatisticsCollector>> stats;
  const nlohmann::json& state = field(sh, "state", where);
  for (const auto& st : field(state, "statistics", where + ".state"))
    stats.push_back(st.is_null() ? nullptr : std::make_shared<StatisticsCollector>());
  const EvalResult part = run_state_from_json(state, stats, source + " (shard state)",
                                              integer_field(record["protocol"], "seq_len", source));
  QEVAL_CHECK(part.schemes.size() == rows.size(), "{}: the shard state has {} schemes, the record {}", source,
              part.schemes.size(), rows.size());
  for (std::size_t s = 0; s < rows.size(); ++s)
    for (const auto& [w, row] : rows[s]) {
      auto it = part.schemes[s].rows.find(w);
      QEVAL_CHECK(it != part.schemes[s].rows.end() && it->second.to_json() == row.to_json(),
                  "{}: window {} of scheme {} differs between the record's rows and the shard state", source, w, s);
    }
  QEVAL_CHECK(part.schemes.front().rows.size() == rows.front().size(), "{}: the shard state holds {} windows, the record {}",
              source, part.schemes.front().rows.size(), rows.front().size());
  return fmt::format("{}: shard {}/{} ({} windows)", source, index, count, rows.front().size());
}

}  // namespace

RecordVerification verify_record(const nlohmann::json& record, const std::string& source) {
  RecordVerification out;
  try {
    // Other subcommands' records (qeval hellaswag's "kind": "hellaswag") are not evaluation records:
    // say which they are rather than which key they lack.
    if (record.is_object() && record.contains("kind") && record["kind"].is_string())
      fail("{}: is a {} record (\"kind\": {}), not an evaluation record of qeval eval; compare, check, plot and merge "
           "read eval records (a HellaSwag record's numbers are in its schemes[].hellaswag.results)",
           source, record["kind"].get<std::string>(), json_text(record["kind"]));
    const nlohmann::json& protocol = field(record, "protocol", source);
    const std::string protocol_name = string_field(protocol, "name", source + ": protocol");
    const std::int64_t seq_len = integer_field(protocol, "seq_len", source + ": protocol");
    QEVAL_CHECK(seq_len >= 2, "{}: protocol seq_len is {}", source, seq_len);
    const nlohmann::json& schemes = field(record, "schemes", source);
    QEVAL_CHECK(schemes.is_array() && !schemes.empty(), "{}: \"schemes\" should be a non-empty list", source);
    std::vector<Rows> rows;
    std::set<std::string> names;
    for (const auto& s : schemes) {
      const nlohmann::json& n = field(s, "name", source + ": a scheme");
      QEVAL_CHECK(n.is_string(), "{}: a scheme's name is {}", source, json_text(n));
      const std::string name = n.get<std::string>();
      QEVAL_CHECK(names.insert(name).second, "{}: scheme {} appears twice", source, in_quotes(name));
      rows.push_back(read_rows(s, name, seq_len, rows.empty(), source));
    }
    const Rows& full_rows = rows.front();
    QEVAL_CHECK(!full_rows.empty(), "{}: the record has no per-window rows", source);
    std::int64_t scored = 0;
    for (const auto& [w, row] : full_rows) scored += row.tokens;
    for (std::size_t i = 1; i < rows.size(); ++i) {
      const std::string name = schemes[i]["name"].get<std::string>();
      QEVAL_CHECK(rows[i].size() == full_rows.size(), "{}: scheme {} has {} windows, full precision {}", source, name,
                  rows[i].size(), full_rows.size());
      for (const auto& [w, row] : rows[i]) {
        auto it = full_rows.find(w);
        QEVAL_CHECK(it != full_rows.end(), "{}: scheme {} has window {}, which full precision lacks", source, name, w);
        QEVAL_CHECK(it->second.tokens == row.tokens, "{}: window {} scores {} tokens in scheme {} but {} in full precision",
                    source, w, row.tokens, name, it->second.tokens);
      }
    }
    out.windows = static_cast<std::int64_t>(full_rows.size());
    const std::int64_t windows = integer_field(protocol, "windows", source + ": protocol");
    const std::int64_t scored_tokens = integer_field(protocol, "scored_tokens", source + ": protocol");
    QEVAL_CHECK(windows == out.windows, "{}: protocol.windows is {}, but the record holds rows for {} windows", source,
                windows, out.windows);
    QEVAL_CHECK(scored_tokens == scored, "{}: protocol.scored_tokens is {}, but the rows score {}", source, scored_tokens,
                scored);
    check_scored_per_window(protocol, full_rows, source);

    // Every record that has timings was written with its window hashes: one without them has had
    // them deleted, which would switch the stream-hash check off.
    QEVAL_CHECK(!record.contains("timings") || record.contains("window_hashes"),
                "{}: the record has timings but no window_hashes; every record qeval writes with timings names "
                "its windows' hashes (deleting them would switch off the token-stream check)", source);
    if (record.contains("window_hashes")) {
      const nlohmann::json& hashes = record["window_hashes"];
      QEVAL_CHECK(hashes.is_object() && hashes.size() == full_rows.size(), "{}: window_hashes should name the {} windows",
                  source, full_rows.size());
      Hasher h;
      for (const auto& [w, v] : checked_window_hashes(hashes, source + ": window_hashes")) {
        QEVAL_CHECK(full_rows.count(w), "{}: window_hashes names window {}, which has no row", source, w);
        h.update_value(w);
        h.update_value(v);
      }
      const nlohmann::json& stream_hash = field(protocol, "token_stream_hash", source + ": protocol");
      QEVAL_CHECK(stream_hash == h.hex(), "{}: protocol.token_stream_hash is {}, but the window hashes give {}", source,
                  json_text(stream_hash), h.hex());
    }

    // The window set against what the protocol promises.
    const std::int64_t max_windows = protocol.contains("max_windows") ? integer_field(protocol, "max_windows", source) : 0;
    QEVAL_CHECK(max_windows == 0 || out.windows <= max_windows, "{}: {} windows, more than the protocol's max_windows {}",
                source, out.windows, max_windows);
    const bool sampled = protocol_name == "windows" && protocol.contains("sample_seed") && !protocol["sample_seed"].is_null();
    const bool shard = record.contains("shard") && !record["shard"].is_null();
    // `qeval merge --allow-partial` marks what its record lacks.
    if (record.contains("partial") && !record["partial"].is_null()) {
      QEVAL_CHECK(record["partial"].is_array(), "{}: \"partial\" should be a list of reasons", source);
      for (const auto& why : record["partial"]) out.partial.push_back(fmt::format("{}: {}", source, json_text(why)));
    }
    if (shard) {
      out.partial.push_back(check_shard(record, rows, source));
    } else if (!sampled && out.partial.empty()) {
      std::int64_t expected = 0;
      for (const auto& [w, row] : full_rows) {
        QEVAL_CHECK(w == expected, "{}: the windows are not 0..{}: window {} is {} (protocol {} gives windows in order)",
                    source, out.windows - 1, expected, w == expected ? "there" : "missing", protocol_name);
        ++expected;
      }
    }
    // A sequential `windows` record with fewer windows than max_windows must be one whose text ran
    // out: the stream it read holds no further whole window. Otherwise windows were cut from it
    // (a 3-window record claiming max_windows 4 would pass a gate against a 4-window baseline).
    if (protocol_name == "windows" && !sampled && !shard && max_windows > 0 && out.windows < max_windows &&
        record.contains("data") && record["data"].contains("stream_tokens_read")) {
      const std::int64_t seq_len = integer_field(protocol, "seq_len", source + ": protocol");
      const bool bos = protocol.value("bos_per_window", false);
      const std::int64_t per_window = bos ? seq_len - 1 : seq_len;
      const std::int64_t read = integer_field(record["data"], "stream_tokens_read", source + ": data");
      if (per_window > 0 && read / per_window > out.windows)
        out.partial.push_back(fmt::format("{}: {} of the {} windows its text holds (data.stream_tokens_read {} at {} "
                                          "tokens a window, protocol.max_windows {})",
                                          source, out.windows, std::min(max_windows, read / per_window), read,
                                          per_window, max_windows));
    }
    if (protocol_name == "gptq-c4" && !shard && out.windows != max_windows)
      out.partial.push_back(fmt::format("{}: {} of gptq-c4's {} samples", source, out.windows, max_windows));

    const SchemeSummary full = summarize(full_rows);
    // The model's layers and the windows' length, which the statistics are held to.
    const StatisticsShape shape = statistics_shape(record, source);
    for (std::size_t i = 0; i < rows.size(); ++i)
      check_summary(schemes[i], schemes[i]["name"].get<std::string>(), summarize(rows[i]), full, shape, source);
    for (std::size_t i = 1; i < rows.size(); ++i) check_tails(schemes[i], schemes[i]["name"].get<std::string>(), rows[i], source);
    // What each scheme says of itself: its spec, static scales, KV-cache errors, tensor types and bytes.
    std::set<std::int64_t> evaluated;
    for (const auto& [w, row] : full_rows) evaluated.insert(w);
    verify_scheme_sections(record, evaluated, source);
    // What else a reader takes from a record: its rounding bands (a gate's width) and its timings.
    verify_rounding_bands(record, source);
    verify_timings(record, source);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed result record: {}", source, e.what());
  }
  return out;
}

std::vector<std::string> require_verified_record(const nlohmann::json& record, const std::string& source,
                                                 bool allow_partial) {
  const RecordVerification v = verify_record(record, source);
  if (!v.partial.empty())
    QEVAL_CHECK(allow_partial, "{} is partial ({}): it does not cover the protocol's windows; merge the shards first, or "
                "pass --allow-partial", source, fmt::join(v.partial, "; "));
  std::vector<std::string> notes;
  for (const auto& p : v.partial) notes.push_back("partial record (--allow-partial): " + p);
  return notes;
}

std::vector<std::string> scheme_definition_differences(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<std::string> out;
  auto definition = [](const nlohmann::json& scheme) {
    nlohmann::json d = scheme.contains("description") && scheme["description"].is_object()
                           ? scheme["description"].value("scheme", nlohmann::json(nullptr))
                           : nlohmann::json(nullptr);
    if (d.is_object()) d.erase("description");  // free text, not the definition
    // A rounding variant is also which scheme it varies, with which seed and ε (records/rounding_band.h).
    if (const nlohmann::json jitter = rounding_identity(scheme); !jitter.is_null()) d["rounding_variant"] = jitter;
    // Static scales are also where they were calibrated: the data (by hash: paths differ between
    // machines) and the windows, which a baseline calibrated on other text does not share.
    // So are GPTQ's and AWQ's weights (calibrated_weights).
    for (const char* section : {"static_scales", "calibrated_weights"}) {
      if (!d.is_object() || !scheme.contains("description") || !scheme["description"].contains(section)) continue;
      const nlohmann::json& s = scheme["description"][section];
      const nlohmann::json cal = s.value("calibration", nlohmann::json::object());
      d[std::string(section) + "_calibrated_on"] = {{"data_hash", cal.value("hash", nlohmann::json(nullptr))},
                                                    {"windows", cal.value("windows", nlohmann::json(nullptr))},
                                                    {"window_hashes", s.value("window_hashes", nlohmann::json(nullptr))}};
    }
    // An importance matrix is its contents (by hash), not its path.
    if (d.is_object() && d.contains("weights") && d["weights"].is_object() && d["weights"].contains("imatrix") &&
        scheme["description"].contains("imatrix") && scheme["description"]["imatrix"].is_object())
      d["weights"]["imatrix"] = scheme["description"]["imatrix"].value("hash", nlohmann::json(nullptr));
    return d;
  };
  if (!a.contains("schemes") || !b.contains("schemes") || !a["schemes"].is_array() || !b["schemes"].is_array()) return out;
  for (const auto& sa : a["schemes"])
    for (const auto& sb : b["schemes"]) {
      if (!sa.contains("name") || !sb.contains("name") || sa["name"] != sb["name"]) continue;
      const nlohmann::json da = definition(sa), db = definition(sb);
      if (da == db) continue;
      for (const auto& d : json_differences(da, db, 3))
        out.push_back(fmt::format("scheme {} is defined differently: {}", json_text(sa["name"]), d));
    }
  return out;
}

}  // namespace qeval
