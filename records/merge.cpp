#include "records/merge.h"

#include "records/rounding_band.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <optional>
#include <set>

#include "common/error.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "records/record.h"
#include "records/record_verify.h"
#include "records/run_state.h"
#include "stats/statistics.h"

namespace qeval {

nlohmann::json merge_shard_records(const std::vector<nlohmann::json>& shards, const std::vector<std::string>& paths,
                                   bool allow_partial) {
  QEVAL_CHECK(!shards.empty(), "merge: no shard records given");
  QEVAL_CHECK(shards.size() == paths.size(), "merge: {} records for {} paths", shards.size(), paths.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    QEVAL_CHECK(shards[i].contains("shard") && shards[i]["shard"].is_object(),
                "merge: {} is not a shard record (made without --shard i/n)", paths[i]);
    verify_record(shards[i], paths[i]);  // the rows are in their domains and the shard holds its windows
  }
  const nlohmann::json& first = shards.front();
  const nlohmann::json identity = evaluation_identity(first);
  std::int64_t count = 0;
  std::set<std::int64_t> seen;
  EvalResult merged;
  std::vector<std::shared_ptr<StatisticsCollector>> merged_stats;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& r = shards[i];
    const std::string& path = paths[i];
    QEVAL_CHECK(r.contains("shard") && r["shard"].is_object(),
                "merge: {} is not a shard record (made without --shard i/n)", path);
    const auto& sh = r["shard"];
    const std::int64_t index = json_integer(sh.at("index"), "merge: " + path + ": shard index");
    const std::int64_t n = json_integer(sh.at("count"), "merge: " + path + ": shard count");
    if (i == 0) count = n;
    QEVAL_CHECK(n == count, "merge: {} is shard {}/{}, but {} is of {} shards", path, index, n, paths[0], count);
    QEVAL_CHECK(seen.insert(index).second, "merge: shard {}/{} is given twice ({})", index, n, path);
    QEVAL_CHECK(evaluation_identity(r) == identity,
                "merge: {} evaluated something else than {} (model, data, protocol, schemes or options differ)", path,
                paths[0]);
    // Collectors shaped like the shard's: null where the shard collected no statistics.
    std::vector<std::shared_ptr<StatisticsCollector>> stats;
    for (const auto& st : sh.at("state").at("statistics"))
      stats.push_back(st.is_null() ? nullptr : std::make_shared<StatisticsCollector>());
    EvalResult part = run_state_from_json(sh.at("state"), stats, path);
    merge_results(merged, part, path);
    if (merged_stats.empty()) {
      merged_stats = stats;
    } else {
      for (std::size_t s = 0; s < stats.size(); ++s)
        if (stats[s]) merged_stats[s]->merge(*stats[s]);
    }
  }
  std::vector<std::string> missing;
  for (std::int64_t i = 0; i < count; ++i)
    if (!seen.count(i)) missing.push_back(fmt::format("shard {}/{} is missing", i, count));
  // Every shard that says how many windows the protocol gave must say the same.
  std::optional<nlohmann::json> protocol_windows;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& sh = shards[i]["shard"];
    if (!sh.contains("protocol_windows")) continue;
    const nlohmann::json these = {sh["protocol_windows"], sh.value("protocol_window_indices", nlohmann::json(nullptr))};
    if (!protocol_windows) protocol_windows = these;
    QEVAL_CHECK(*protocol_windows == these, "merge: {} says the protocol gave {} windows, another shard says {}", paths[i],
                json_text(these[0]), json_text((*protocol_windows)[0]));
  }
  QEVAL_CHECK(missing.empty() || allow_partial, "merge: {}; pass --allow-partial to write a partial record",
              fmt::format("{}", fmt::join(missing, ", ")));

  RecordContext context;
  context.command = {"qeval", "merge"};
  for (const auto& p : paths) context.command.push_back(p);
  context.model = first.at("model");
  context.tokenizer = first.at("tokenizer");
  context.data = first.at("data");
  context.protocol = first.at("protocol");
  for (const char* key : {"windows", "scored_tokens", "token_stream_hash"}) context.protocol.erase(key);
  context.precision = first.at("precision");
  context.options = first.at("options");
  context.options["shard"] = nullptr;
  context.options["merged_from_shards"] = count;
  std::vector<nlohmann::json> statistics;
  for (const auto& s : merged_stats) statistics.push_back(s ? s->summary() : nlohmann::json(nullptr));
  nlohmann::json record = build_record(context, scheme_infos(first), merged, statistics);
  attach_rounding_bands(record);  // from the merged variants' numbers, not a shard's
  // The merged record must hold the protocol's windows: 0..n-1 for the sequential protocols, and
  // as many as the shards recorded.
  if (protocol_windows && (*protocol_windows)[0] != merged.windows)
    missing.push_back(fmt::format("{} of the {} windows the protocol gave", merged.windows, json_text((*protocol_windows)[0])));
  if (!missing.empty()) {
    QEVAL_CHECK(allow_partial, "merge: {}; pass --allow-partial to write a partial record", fmt::format("{}", fmt::join(missing, ", ")));
    record["partial"] = missing;
  }
  verify_record(record, "merge: the merged record");
  return record;
}

}  // namespace qeval
