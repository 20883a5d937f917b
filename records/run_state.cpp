#include "records/run_state.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <set>

#include "common/error.h"
#include "common/hash.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "records/window_rows.h"

namespace qeval {
namespace {

// XXH3 of the state's compact JSON without its "checksum" (keys sorted, doubles round-trip:
// the same text whenever the same content is written or read back).
std::string state_checksum(nlohmann::json state) {
  state.erase("checksum");
  Hasher h;
  h.update(state.dump());
  return h.hex();
}

double seconds_value(const nlohmann::json& v, const std::string& where) {
  QEVAL_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0,
              "{}: expected a finite number of seconds >= 0, found {}", where, json_text(v));
  return v.get<double>();
}

nlohmann::json kv_sums_to_json(const KvErrorSums& sums) {
  nlohmann::json layers = nlohmann::json::object();
  for (const auto& [layer, windows] : sums.layers) {
    nlohmann::json by_window = nlohmann::json::object();
    for (const auto& [index, w] : windows)
      by_window[std::to_string(index)] = {w.err[0], w.err[1], w.err[2], w.err[3], w.norm[0], w.norm[1], w.norm[2], w.norm[3]};
    layers[std::to_string(layer)] = std::move(by_window);
  }
  return layers;
}

// One scheme's sums, read back: every value a finite sum of squares (>= 0), every layer holding
// exactly `windows` (the state's).
KvErrorSums kv_sums_from_json(const nlohmann::json& layers, const std::map<std::int64_t, std::uint64_t>& windows,
                              const std::string& where) {
  QEVAL_CHECK(layers.is_object(), "{}: expected an object of layers, found {}", where, json_text(layers));
  KvErrorSums sums;
  for (const auto& [layer_key, by_window] : layers.items()) {
    const std::string layer_where = fmt::format("{}.\"{}\"", where, layer_key);
    const std::int64_t layer = window_index_key(layer_key, where + " (a layer)");
    QEVAL_CHECK(by_window.is_object(), "{}: expected an object of windows, found {}", layer_where, json_text(by_window));
    std::map<std::int64_t, KvErrorSums::Window>& into = sums.layers[layer];
    for (const auto& [window_key, values] : by_window.items()) {
      const std::string value_where = fmt::format("{}.\"{}\"", layer_where, window_key);
      const std::int64_t index = window_index_key(window_key, layer_where);
      QEVAL_CHECK(values.is_array() && values.size() == 8, "{}: expected 8 numbers (4 error sums, 4 norm sums), found {}",
                  value_where, json_text(values, 80));
      KvErrorSums::Window w;
      for (std::size_t i = 0; i < 8; ++i) {
        const nlohmann::json& v = values[i];
        QEVAL_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0,
                    "{}[{}]: expected a finite sum of squares >= 0, found {}", value_where, i, json_text(v));
        (i < 4 ? w.err[i] : w.norm[i - 4]) = v.get<double>();
      }
      into.emplace(index, w);
    }
    std::vector<std::int64_t> held, expected;
    for (const auto& entry : into) held.push_back(entry.first);
    for (const auto& entry : windows) expected.push_back(entry.first);
    QEVAL_CHECK(held == expected, "{}: holds windows [{}], the state's rows [{}]: they must be the same windows",
                layer_where, fmt::join(held.begin(), held.begin() + std::min<std::size_t>(held.size(), 8), ", "),
                fmt::join(expected.begin(), expected.begin() + std::min<std::size_t>(expected.size(), 8), ", "));
  }
  return sums;
}

// A kept_positions report over `windows` windows: each linear saw each window once, and kept a
// position at most once per window.
void check_kept_positions(const nlohmann::json& kept, std::int64_t windows, const std::string& where) {
  QEVAL_CHECK(kept.is_object() && kept.contains("rule") && kept["rule"].is_string() && kept.contains("count") &&
                  kept.contains("layers") && kept["layers"].is_array(),
              "{}: expected a kept_positions report (rule, count, sequences, positions, layers), found {}", where,
              json_text(kept, 80));
  auto positions = [&](const nlohmann::json& list, const std::string& at) {
    QEVAL_CHECK(list.is_array(), "{}.positions: expected a list of [position, count], found {}", at, json_text(list, 80));
    for (const auto& pair : list) {
      QEVAL_CHECK(pair.is_array() && pair.size() == 2, "{}.positions: expected [position, count], found {}", at,
                  json_text(pair, 80));
      json_integer(pair[0], at + ".positions: a position");
      json_integer(pair[1], at + ".positions: a count");
    }
  };
  QEVAL_CHECK(json_integer(kept.at("sequences"), where + ".sequences") == windows,
              "{}.sequences is {}, but the state holds {} windows", where, json_text(kept.at("sequences")), windows);
  positions(kept.at("positions"), where);
  for (std::size_t l = 0; l < kept["layers"].size(); ++l) {
    const nlohmann::json& layer = kept["layers"][l];
    const std::string at = fmt::format("{}.layers[{}]", where, l);
    QEVAL_CHECK(layer.is_object() && layer.contains("name") && layer.contains("sequences") && layer.contains("positions"),
                "{}: expected {{name, sequences, positions}}, found {}", at, json_text(layer, 80));
    QEVAL_CHECK(json_integer(layer["sequences"], at + ".sequences") == windows,
                "{}.sequences is {}, but the state holds {} windows", at, json_text(layer["sequences"]), windows);
    positions(layer["positions"], at);
    for (const auto& pair : layer["positions"])
      QEVAL_CHECK(pair[0].get<std::int64_t>() >= 0 && pair[1].get<std::int64_t>() >= 0 &&
                      pair[1].get<std::int64_t>() <= windows,
                  "{}.positions: {} is not a position kept by 0 to {} windows", at, json_text(pair), windows);
  }
}

}  // namespace

std::uint64_t window_content_hash(const Window& w) { return window_hash(w); }  // the evaluator's, one definition

nlohmann::json run_state_to_json(const EvalResult& result,
                                 const std::vector<std::shared_ptr<StatisticsCollector>>& statistics,
                                 const SchemeMeasuresList& measures) {
  nlohmann::json hashes = nlohmann::json::object();
  for (const auto& [index, hash] : result.window_hashes) hashes[std::to_string(index)] = hash_hex(hash);
  nlohmann::json schemes = nlohmann::json::array();
  for (const auto& s : result.schemes) {
    nlohmann::json rows = nlohmann::json::object();
    for (const auto& [index, row] : s.rows) rows[std::to_string(index)] = row.to_json();
    schemes.push_back({{"forward_seconds", s.forward_seconds}, {"rows", rows}});
  }
  nlohmann::json stats = nlohmann::json::array();
  for (const auto& c : statistics) stats.push_back(c ? c->state_to_json() : nlohmann::json(nullptr));
  nlohmann::json state = {{"windows", result.windows},
                          {"scored_tokens", result.scored_tokens},
                          {"processed_tokens", result.processed_tokens},
                          {"seconds", result.seconds},
                          {"window_hashes", hashes},
                          {"schemes", schemes},
                          {"statistics", stats}};
  if (std::any_of(measures.begin(), measures.end(), [](const auto& m) { return m.kv_cache_errors.has_value(); })) {
    nlohmann::json kv = nlohmann::json::array();
    for (const auto& m : measures)
      kv.push_back(m.kv_cache_errors ? kv_sums_to_json(*m.kv_cache_errors) : nlohmann::json(nullptr));
    state["kv_cache_errors"] = std::move(kv);
  }
  if (std::any_of(measures.begin(), measures.end(), [](const auto& m) { return !m.kept_positions.is_null(); })) {
    nlohmann::json kept = nlohmann::json::array();
    for (const auto& m : measures) kept.push_back(m.kept_positions);
    state["kept_positions"] = std::move(kept);
  }
  state["checksum"] = state_checksum(state);
  return state;
}

EvalResult run_state_from_json(const nlohmann::json& state,
                               std::vector<std::shared_ptr<StatisticsCollector>>& statistics, const std::string& source,
                               std::int64_t max_window_tokens, SchemeMeasuresList* measures) {
  EvalResult r;
  try {
    QEVAL_CHECK(state.is_object(), "{}: the evaluation state is {}, not an object", source, state.type_name());
    QEVAL_CHECK(state.contains("checksum") && state["checksum"].is_string(),
                "{}: the evaluation state has no checksum (written by an older qeval, or edited); remove it", source);
    QEVAL_CHECK(state["checksum"] == state_checksum(state),
                "{}: the evaluation state's checksum {} does not match its content ({}): the file was changed after "
                "qeval wrote it; remove it to start again",
                source, json_text(state["checksum"]), state_checksum(state));
    r.windows = json_integer(state.at("windows"), source + ": windows");
    r.scored_tokens = json_integer(state.at("scored_tokens"), source + ": scored_tokens");
    r.processed_tokens = json_integer(state.at("processed_tokens"), source + ": processed_tokens");
    r.seconds = seconds_value(state.at("seconds"), source + ": seconds");
    QEVAL_CHECK(state.at("schemes").is_array(), "{}: schemes should be a list", source);
    for (const auto& s : state.at("schemes")) {
      SchemeResult sr;
      sr.forward_seconds =
          seconds_value(s.at("forward_seconds"), fmt::format("{}: scheme {} forward_seconds", source, r.schemes.size()));
      r.schemes.push_back(std::move(sr));
    }
    // The window-keyed parts last, together (records/window_rows.h reads them).
    r.window_hashes = checked_window_hashes(state.at("window_hashes"), source + ": window_hashes");
    for (std::size_t scheme = 0; scheme < r.schemes.size(); ++scheme)
      r.schemes[scheme].rows = checked_window_rows(state.at("schemes")[scheme].at("rows"), max_window_tokens, scheme == 0,
                                                   fmt::format("{}: scheme {}", source, scheme));
    const auto& stats = state.at("statistics");
    QEVAL_CHECK(stats.is_array() && stats.size() == statistics.size(), "has statistics for {} schemes, this run has {}",
                stats.is_array() ? stats.size() : 0, statistics.size());
    QEVAL_CHECK(r.schemes.size() == statistics.size(), "has {} schemes, this run has {}", r.schemes.size(),
                statistics.size());
    for (std::size_t i = 0; i < statistics.size(); ++i) {
      QEVAL_CHECK(stats[i].is_null() == (statistics[i] == nullptr),
                  "scheme {} {} statistics, this run {}", i, stats[i].is_null() ? "has no" : "has",
                  statistics[i] ? "collects them" : "does not");
      // Assign in place: the schemes' observers point at these very collectors.
      if (statistics[i]) *statistics[i] = StatisticsCollector::state_from_json(stats[i], source);
    }
    if (measures) measures->assign(r.schemes.size(), SchemeMeasures{});
    for (const char* key : {"kv_cache_errors", "kept_positions"}) {
      if (!state.contains(key)) continue;
      const nlohmann::json& list = state[key];
      QEVAL_CHECK(list.is_array() && list.size() == r.schemes.size(),
                  "{}: {}: expected a list of {} entries (one per scheme), found {}", source, key, r.schemes.size(),
                  json_text(list, 80));
      for (std::size_t i = 0; i < list.size(); ++i) {
        if (list[i].is_null()) continue;
        const std::string where = fmt::format("{}: {}[{}]", source, key, i);
        if (std::string(key) == "kv_cache_errors") {
          KvErrorSums sums = kv_sums_from_json(list[i], r.window_hashes, where);
          if (measures) (*measures)[i].kv_cache_errors = std::move(sums);
        } else {
          check_kept_positions(list[i], r.windows, where);
          if (measures) (*measures)[i].kept_positions = list[i];
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed evaluation state: {}", source, e.what());
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind(source, 0) == 0) throw;  // already names the file
    fail("{}: evaluation state does not fit this run: {}", source, what);
  }

  // The parts must agree with each other: every scheme scored the windows the hash list names,
  // the same number of tokens in each, and the counts are the sums of the rows.
  QEVAL_CHECK(static_cast<std::int64_t>(r.window_hashes.size()) == r.windows,
              "{}: evaluation state lists {} window hashes for {} windows", source, r.window_hashes.size(), r.windows);
  std::int64_t scored = 0;
  for (std::size_t s = 0; s < r.schemes.size(); ++s) {
    const auto& rows = r.schemes[s].rows;
    QEVAL_CHECK(rows.size() == r.window_hashes.size(), "{}: scheme {} has {} rows for {} windows", source, s, rows.size(),
                r.window_hashes.size());
    for (const auto& [index, row] : rows) {
      QEVAL_CHECK(r.window_hashes.count(index), "{}: scheme {} has a row for window {}, which has no hash", source, s,
                  index);
      const WindowScores& full = r.schemes.front().rows.at(index);
      QEVAL_CHECK(row.tokens == full.tokens, "{}: window {} scores {} tokens in scheme {} but {} in full precision",
                  source, index, row.tokens, s, full.tokens);
      if (s == 0) scored += row.tokens;
    }
  }
  QEVAL_CHECK(scored == r.scored_tokens, "{}: scored_tokens is {}, but the rows score {}", source, r.scored_tokens,
              scored);
  QEVAL_CHECK(r.processed_tokens >= r.scored_tokens + r.windows,
              "{}: processed_tokens {} is less than the scored tokens plus one context token per window ({})", source,
              r.processed_tokens, r.scored_tokens + r.windows);
  for (std::size_t s = 0; s < statistics.size(); ++s) {
    if (!statistics[s]) continue;
    const std::vector<std::int64_t> seen = statistics[s]->window_indices();
    std::vector<std::int64_t> expected;
    for (const auto& entry : r.window_hashes) expected.push_back(entry.first);
    QEVAL_CHECK(seen == expected, "{}: scheme {}'s statistics hold windows [{}], its rows [{}]: they must be the same windows",
                source, s, fmt::join(seen.begin(), seen.begin() + std::min<std::size_t>(seen.size(), 8), ", "),
                fmt::join(expected.begin(), expected.begin() + std::min<std::size_t>(expected.size(), 8), ", "));
  }
  return r;
}

void verify_resumed_windows(const EvalResult& resumed, WindowSource& windows,
                            const std::function<bool(std::int64_t)>& selected, const std::string& source) {
  if (resumed.window_hashes.empty()) return;
  std::set<std::int64_t> pending;
  for (const auto& entry : resumed.window_hashes) pending.insert(entry.first);
  for (std::int64_t index : pending)
    QEVAL_CHECK(!selected || selected(index), "{}: window {} is not one of this shard's windows", source, index);
  const std::int64_t last = *pending.rbegin();
  while (!pending.empty()) {
    std::optional<Window> w = windows.next();
    if (!w) break;
    if (w->index > last) break;
    if (!pending.erase(w->index)) continue;
    const std::uint64_t hash = window_content_hash(*w);
    QEVAL_CHECK(hash == resumed.window_hashes.at(w->index),
                "{}: window {} has hash {} in the state, but the data gives {}: the state does not belong to these "
                "windows; remove it to start again",
                source, w->index, hash_hex(resumed.window_hashes.at(w->index)), hash_hex(hash));
    const std::int64_t tokens = resumed.schemes.front().rows.at(w->index).tokens;
    QEVAL_CHECK(tokens == w->scored(), "{}: window {} scores {} tokens in the state, but the window scores {}", source,
                w->index, tokens, w->scored());
  }
  QEVAL_CHECK(pending.empty(), "{}: window {} is in the state, but the data and protocol give no such window", source,
              pending.empty() ? 0 : *pending.begin());
}

void merge_results(EvalResult& into, const EvalResult& other, const std::string& source) {
  if (into.schemes.empty()) into.schemes.resize(other.schemes.size());
  QEVAL_CHECK(into.schemes.size() == other.schemes.size(), "{}: has {} schemes, expected {}", source,
              other.schemes.size(), into.schemes.size());
  for (const auto& [index, hash] : other.window_hashes) {
    QEVAL_CHECK(!into.contains(index), "{}: window {} was already evaluated by another shard", source, index);
    into.window_hashes[index] = hash;
  }
  for (std::size_t s = 0; s < other.schemes.size(); ++s) {
    for (const auto& [index, row] : other.schemes[s].rows) into.schemes[s].rows[index] = row;
    into.schemes[s].forward_seconds += other.schemes[s].forward_seconds;
  }
  into.windows += other.windows;
  into.scored_tokens += other.scored_tokens;
  into.processed_tokens += other.processed_tokens;
  into.seconds += other.seconds;
}

}  // namespace qeval
