#include "eval/run_state.h"

#include <cstdlib>

#include "common/error.h"
#include "common/hash.h"
#include "common/json_integer.h"

namespace qeval {

nlohmann::json run_state_to_json(const EvalResult& result,
                                 const std::vector<std::shared_ptr<StatisticsCollector>>& statistics) {
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
  return {{"windows", result.windows},
          {"scored_tokens", result.scored_tokens},
          {"processed_tokens", result.processed_tokens},
          {"seconds", result.seconds},
          {"window_hashes", hashes},
          {"schemes", schemes},
          {"statistics", stats}};
}

EvalResult run_state_from_json(const nlohmann::json& state,
                               std::vector<std::shared_ptr<StatisticsCollector>>& statistics,
                               const std::string& source) {
  EvalResult r;
  try {
    r.windows = json_integer(state.at("windows"), source + ": windows");
    r.scored_tokens = json_integer(state.at("scored_tokens"), source + ": scored_tokens");
    r.processed_tokens = json_integer(state.at("processed_tokens"), source + ": processed_tokens");
    r.seconds = state.at("seconds").get<double>();
    for (const auto& [index, hex] : state.at("window_hashes").items())
      r.window_hashes[std::stoll(index)] = std::strtoull(hex.get<std::string>().c_str(), nullptr, 16);
    for (const auto& s : state.at("schemes")) {
      SchemeResult sr;
      sr.forward_seconds = s.at("forward_seconds").get<double>();
      for (const auto& [index, row] : s.at("rows").items()) sr.rows[std::stoll(index)] = WindowScores::from_json(row);
      r.schemes.push_back(std::move(sr));
    }
    const auto& stats = state.at("statistics");
    QEVAL_CHECK(stats.size() == statistics.size(), "has statistics for {} schemes, this run has {}", stats.size(),
                statistics.size());
    QEVAL_CHECK(r.schemes.size() == statistics.size(), "has {} schemes, this run has {}", r.schemes.size(),
                statistics.size());
    for (std::size_t i = 0; i < statistics.size(); ++i) {
      QEVAL_CHECK(stats[i].is_null() == (statistics[i] == nullptr),
                  "scheme {} {} statistics, this run {}", i, stats[i].is_null() ? "has no" : "has",
                  statistics[i] ? "collects them" : "does not");
      // Assign in place: the schemes' observers point at these very collectors.
      if (statistics[i]) *statistics[i] = StatisticsCollector::state_from_json(stats[i], source);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed evaluation state: {}", source, e.what());
  } catch (const Error& e) {
    fail("{}: evaluation state does not fit this run: {}", source, e.what());
  }
  QEVAL_CHECK(static_cast<std::int64_t>(r.window_hashes.size()) == r.windows,
              "{}: evaluation state lists {} window hashes for {} windows", source, r.window_hashes.size(), r.windows);
  return r;
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
