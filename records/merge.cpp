#include "records/merge.h"

#include "records/rounding_band.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include <memory>
#include <optional>
#include <set>

#include "common/error.h"
#include "common/json_diff.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "eval/token_values_file.h"
#include "quant/rewrite.h"  // add_kept_positions
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
  SchemeMeasuresList merged_measures;
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
    if (const nlohmann::json these = evaluation_identity(r); these != identity)
      fail("merge: {} evaluated something else than {}: {} (the value in {} first)", path, paths[0],
           fmt::join(json_differences(identity, these, 4), "; "), paths[0]);
    // Collectors shaped like the shard's: null where the shard collected no statistics.
    std::vector<std::shared_ptr<StatisticsCollector>> stats;
    for (const auto& st : sh.at("state").at("statistics"))
      stats.push_back(st.is_null() ? nullptr : std::make_shared<StatisticsCollector>());
    SchemeMeasuresList measures;
    EvalResult part = run_state_from_json(sh.at("state"), stats, path, 0, &measures);
    merge_results(merged, part, path);
    // What the schemes measured besides their scores: each quantised KV cache's error sums by window
    // (reduced in window order below, as one process does) and the positions kept, added up.
    merged_measures.resize(measures.size());
    for (std::size_t s = 0; s < measures.size(); ++s) {
      const nlohmann::json& scheme = r.at("schemes").at(s);
      const bool has_cache = scheme.at("description").contains("kv_cache_error");
      const bool keeps = scheme.contains("kept_positions");
      // A shard written before states carried these cannot give the one-process numbers.
      QEVAL_CHECK(has_cache == measures[s].kv_cache_errors.has_value(),
                  "merge: {}: scheme {} {} a kv_cache_error, but its shard state {} the per-window error sums; "
                  "evaluate the shard again with this qeval", path, json_text(scheme.at("name")),
                  has_cache ? "reports" : "reports no", measures[s].kv_cache_errors ? "holds" : "lacks");
      QEVAL_CHECK(keeps == !measures[s].kept_positions.is_null(),
                  "merge: {}: scheme {} {} kept_positions, but its shard state {} them; evaluate the shard again "
                  "with this qeval", path, json_text(scheme.at("name")), keeps ? "reports" : "reports no",
                  measures[s].kept_positions.is_null() ? "lacks" : "holds");
      SchemeMeasures& into = merged_measures[s];
      if (measures[s].kv_cache_errors) {
        if (!into.kv_cache_errors) into.kv_cache_errors.emplace();
        into.kv_cache_errors->merge(*measures[s].kv_cache_errors, path);
      }
      into.kept_positions = add_kept_positions(into.kept_positions, measures[s].kept_positions, path);
    }
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
  // The percentiles from every shard's per-token values (<shard>.tokens/, eval/token_values_file.h),
  // each shard's held to its rows; without all of them the merged record has none, and says why.
  std::vector<std::string> no_values;
  for (const auto& p : paths)
    if (!std::filesystem::is_directory(p + ".tokens")) no_values.push_back(p + ".tokens");
  for (std::size_t s = 1; s < merged.schemes.size() && no_values.empty(); ++s) {
    std::vector<std::filesystem::path> files;
    for (const auto& p : paths) files.push_back(token_values_file(p + ".tokens", s));
    const std::string name = first.at("schemes").at(s).at("name").get<std::string>();
    check_values_against_rows(files, merged.schemes[s].rows, name);
    const TokenDistributions d = token_distributions(files);
    merged.schemes[s].kl_values = d.kl;
    merged.schemes[s].dp_values = d.dp;
  }
  std::vector<SchemeInfo> infos = scheme_infos(first);
  for (std::size_t s = 0; s < infos.size() && s < merged_measures.size(); ++s) {
    if (!merged_measures[s].kv_cache_errors) continue;
    nlohmann::json head = infos[s].description.at("kv_cache_error");  // format, keep_first, rotation
    head.erase("layers");
    head.erase("mean");
    infos[s].description["kv_cache_error"] = kv_error_report(*merged_measures[s].kv_cache_errors, head);
  }
  nlohmann::json record = build_record(context, infos, merged, statistics);
  for (std::size_t s = 0; s < infos.size() && s < merged_measures.size(); ++s)
    if (!merged_measures[s].kept_positions.is_null()) record["schemes"][s]["kept_positions"] = merged_measures[s].kept_positions;
  if (!no_values.empty() && merged.schemes.size() > 1)
    record["per_token_values_missing"] = no_values;  // no percentiles: these shards' values are not beside them
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
