#include "records/series_record.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/json_diff.h"
#include "common/strict_json.h"
#include "records/record.h"
#include "records/record_verify.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

nlohmann::json field(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) ? j[key] : nlohmann::json(nullptr);
}

// The headline statistics by the names `qeval check` uses (reports/check.h statistic_names()).
nlohmann::json headline_statistics(const nlohmann::json& summary) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, path] : statistic_names()) {
    // A model without attention (Mamba) or a run without attention statistics has no "attention":
    // the walk stops at the first missing key and the statistic is null.
    const nlohmann::json* at = &summary;
    for (const auto& key : path) {
      at = at->is_object() && at->contains(key) ? &(*at)[key] : nullptr;
      if (!at) break;
    }
    out[name] = at ? *at : nlohmann::json(nullptr);
  }
  return out;
}

}  // namespace

nlohmann::json series_evaluation_identity(const nlohmann::json& record) {
  nlohmann::json id = evaluation_identity(record);
  for (const char* key : {"model_weights", "model_weights_kind", "model_config", "model_transforms"}) id.erase(key);
  const nlohmann::json& protocol = record.at("protocol");
  id["windows"] = {{"windows", field(protocol, "windows")},
                   {"scored_tokens", field(protocol, "scored_tokens")},
                   {"token_stream_hash", field(protocol, "token_stream_hash")}};
  return id;
}

nlohmann::json series_entry(const SeriesCheckpoint& c, const nlohmann::json& record, const std::string& record_path) {
  nlohmann::json schemes = nlohmann::json::array();
  nlohmann::json statistics = nlohmann::json::object();
  try {
    for (const auto& s : record.at("schemes")) {
      const nlohmann::json& p = s.at("perplexity");
      const nlohmann::json& v = s.at("vs_full");
      schemes.push_back({{"name", s.at("name")},
                         {"ppl", field(p, "ppl")},
                         {"nll_mean", field(p, "nll_mean")},
                         {"nll_se", field(p, "nll_se")},
                         {"dppl", field(v, "dppl")},
                         {"paired_dnll_mean", field(v, "paired_dnll_mean")},
                         {"paired_dnll_se", field(v, "paired_dnll_se")},
                         {"kl_mean", field(v, "kl_mean")},
                         {"top1_agreement", field(v, "top1_agreement")}});
      if (s.contains("statistics") && s["statistics"].is_object())
        statistics[s.at("name").get<std::string>()] = headline_statistics(s["statistics"]);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: a record lacks a field the series needs: {}", record_path, e.what());
  }
  return {{"step", c.step},
          {"tokens", c.tokens ? nlohmann::json(*c.tokens) : nlohmann::json(nullptr)},
          {"name", c.name},
          {"model", c.path.string()},
          {"weights_hash", record.at("model").value("weights_hash", nlohmann::json(nullptr))},
          {"record", record_path},
          {"training", c.training},
          {"schemes", schemes},
          {"statistics", statistics}};
}

nlohmann::json build_series_record(const SeriesListing& listing, const std::string& source_argument,
                                   const nlohmann::json& settings, const std::vector<nlohmann::json>& evaluations,
                                   const std::vector<nlohmann::json>& entries) {
  QEVAL_CHECK(evaluations.size() == entries.size(), "series: {} evaluations for {} checkpoints", evaluations.size(),
              entries.size());
  for (std::size_t i = 1; i < entries.size(); ++i) {
    QEVAL_CHECK(entries[i].at("step") != entries[i - 1].at("step"), "series: step {} twice", entries[i].at("step").dump());
    QEVAL_CHECK(evaluations[i] == evaluations.front(),
                "series {}: {} ({}) was not evaluated as {} ({}) was: {}; every checkpoint of a series must be "
                "evaluated on the same windows with the same schemes and options",
                source_argument, entries[i].at("name").get<std::string>(), entries[i].at("record").get<std::string>(),
                entries.front().at("name").get<std::string>(), entries.front().at("record").get<std::string>(),
                fmt::join(json_differences(evaluations.front(), evaluations[i]), "; "));
  }
  return {{"kind", "qeval series"},
          {"series_version", kSeriesVersion},
          {"source", {{"path", source_argument}, {"format", to_string(listing.format)}}},
          {"settings", settings},
          {"evaluation", evaluations.empty() ? nlohmann::json(nullptr) : evaluations.front()},
          {"checkpoints", entries}};
}

bool is_series_record(const nlohmann::json& j) { return j.is_object() && j.value("kind", "") == "qeval series"; }

nlohmann::json read_series_record(const fs::path& path) {
  // Strict: a repeated key is an error, not a silent last-one-wins.
  const nlohmann::json j = parse_json_strict(read_file(path), path.string());
  QEVAL_CHECK(is_series_record(j), "{}: not a qeval series record (no \"kind\": \"qeval series\")", path.string());
  QEVAL_CHECK(j.value("series_version", 0) == kSeriesVersion, "{}: series_version {} is not supported (expected {})",
              path.string(), j.value("series_version", nlohmann::json(nullptr)).dump(), kSeriesVersion);
  QEVAL_CHECK(j.contains("checkpoints") && j["checkpoints"].is_array(), "{}: series record without a \"checkpoints\" list",
              path.string());
  for (const auto& c : j["checkpoints"])
    QEVAL_CHECK(c.is_object() && c.contains("step") && c["step"].is_number_integer() && c.contains("schemes") &&
                    c.contains("statistics"),
                "{}: a checkpoint entry lacks step, schemes or statistics: {}", path.string(), c.dump().substr(0, 200));
  return j;
}

nlohmann::json read_verified_series_record(const fs::path& path) {
  nlohmann::json series = read_series_record(path);
  const std::string where = path.string();
  const nlohmann::json& entries = series["checkpoints"];
  QEVAL_CHECK(!entries.empty(), "{}: a series record without checkpoints", where);
  QEVAL_CHECK(series.contains("evaluation") && series["evaluation"].is_object(), "{}: a series record without its "
              "\"evaluation\"", where);
  std::optional<std::int64_t> last_step, last_tokens;
  std::set<fs::path> records_seen;
  for (const auto& e : entries) {
    const std::int64_t step = e.at("step").get<std::int64_t>();
    QEVAL_CHECK(step >= 0, "{}: step {}: a step counts optimizer steps from 0", where, step);
    QEVAL_CHECK(!last_step || step > *last_step, "{}: step {} follows step {}: a series' steps must increase, each once",
                where, step, *last_step);
    last_step = step;
    QEVAL_CHECK(e.contains("record") && e["record"].is_string() && e.contains("model") && e["model"].is_string() &&
                    e.contains("name") && e["name"].is_string(),
                "{}: step {}: the entry lacks its record, model or name", where, step);
    const nlohmann::json& tokens = e.value("tokens", nlohmann::json(nullptr));
    QEVAL_CHECK(tokens.is_null() || (tokens.is_number_integer() && tokens.get<std::int64_t>() >= 0),
                "{}: step {}: tokens seen must be a count or null, found {}", where, step, tokens.dump());
    if (tokens.is_number_integer()) {
      QEVAL_CHECK(!last_tokens || tokens.get<std::int64_t>() >= *last_tokens,
                  "{}: step {} has seen {} tokens, fewer than the step before it ({})", where, step, tokens.dump(),
                  *last_tokens);
      last_tokens = tokens.get<std::int64_t>();
    }
    const fs::path rel = e["record"].get<std::string>();
    const fs::path record_path = (rel.is_absolute() ? rel : path.parent_path() / rel).lexically_normal();
    QEVAL_CHECK(records_seen.insert(record_path).second, "{}: step {} points at {}, the record of an earlier step too",
                where, step, record_path.string());
    const nlohmann::json record = read_record(record_path);
    require_verified_record(record, record_path.string(), /*allow_partial=*/false);
    const std::string recorded_model = record.at("model").value("path", "");
    QEVAL_CHECK(recorded_model == e["model"].get<std::string>(), "{}: step {} is {}, but its record {} is the record of {}",
                where, step, e["model"].get<std::string>(), record_path.string(), recorded_model);
    const auto evaluation = json_differences(series["evaluation"], series_evaluation_identity(record));
    QEVAL_CHECK(evaluation.empty(), "{}: step {}'s record {} was not evaluated as the series says ({})", where, step,
                record_path.string(), fmt::format("{}", fmt::join(evaluation, "; ")));
    SeriesCheckpoint c;
    c.name = e["name"].get<std::string>();
    c.path = e["model"].get<std::string>();
    c.step = step;
    if (tokens.is_number_integer()) c.tokens = tokens.get<std::int64_t>();
    c.training = e.value("training", nlohmann::json::object());
    const auto entry = json_differences(e, series_entry(c, record, e["record"].get<std::string>()));
    QEVAL_CHECK(entry.empty(), "{}: step {} does not hold what its record {} says ({}): the series was edited or its "
                "records replaced; evaluate the series again", where, step, record_path.string(),
                fmt::format("{}", fmt::join(entry, "; ")));
  }
  return series;
}

bool is_series_record_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  const nlohmann::json j = nlohmann::json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
  return !j.is_discarded() && is_series_record(j);
}

nlohmann::json read_series_checkpoint_record(const fs::path& series_path, const nlohmann::json& entry) {
  const fs::path rel = entry.at("record").get<std::string>();
  return read_record(rel.is_absolute() ? rel : series_path.parent_path() / rel);
}

std::string series_label(const nlohmann::json& series) {
  fs::path source = series.at("source").at("path").get<std::string>();
  if (source.filename().empty()) source = source.parent_path();
  return series.at("source").value("format", "") == "list" ? source.stem().string() : source.filename().string();
}

}  // namespace qeval
