#include "eval/merge.h"

#include <memory>
#include <set>

#include "common/error.h"
#include "common/json_integer.h"
#include "eval/record.h"
#include "eval/run_state.h"
#include "eval/statistics.h"

namespace qeval {

nlohmann::json merge_shard_records(const std::vector<nlohmann::json>& shards, const std::vector<std::string>& paths) {
  QEVAL_CHECK(!shards.empty(), "merge: no shard records given");
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
  for (std::int64_t i = 0; i < count; ++i)
    QEVAL_CHECK(seen.count(i), "merge: shard {}/{} is missing", i, count);

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
  return build_record(context, scheme_infos(first), merged, statistics);
}

}  // namespace qeval
