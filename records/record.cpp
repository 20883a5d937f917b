#include "records/record.h"

#include <ctime>

#include "common/build_info.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "eval/fidelity_summary.h"
#include "eval/position_buckets.h"
#include "loaders/checkpoints/weights_hash.h"

namespace qeval {
namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

std::vector<SchemeInfo> scheme_infos(const std::vector<EvalScheme>& schemes, const std::vector<std::int64_t>& linear_weight_bytes) {
  std::vector<SchemeInfo> infos;
  for (std::size_t i = 0; i < schemes.size(); ++i)
    infos.push_back({schemes[i].name, schemes[i].description, i < linear_weight_bytes.size() ? linear_weight_bytes[i] : 0});
  return infos;
}

std::vector<SchemeInfo> scheme_infos(const nlohmann::json& record) {
  std::vector<SchemeInfo> infos;
  for (const auto& s : record.at("schemes"))
    infos.push_back({s.at("name").get<std::string>(), s.at("description"), json_integer(s.at("linear_weight_bytes"), "record: linear_weight_bytes")});
  return infos;
}

nlohmann::json precision_identity(const nlohmann::json& precision) {
  if (!precision.is_object()) return precision;
  // Compared as JSON, never cast: a number where "cpu" belongs is a difference, not a type error.
  return {{"dtype", precision.contains("dtype") ? precision["dtype"] : nlohmann::json(nullptr)},
          {"device", precision.contains("device") ? precision["device"] : nlohmann::json("cpu")}};
}

nlohmann::json evaluation_identity(const nlohmann::json& record) {
  nlohmann::json protocol = record.at("protocol");
  for (const char* key : {"windows", "scored_tokens", "token_stream_hash"}) protocol.erase(key);
  nlohmann::json schemes = nlohmann::json::array();
  for (const auto& s : record.at("schemes")) {
    // What the rewrite reports once the layers were built (their list and bytes) is the same for
    // every evaluation of the scheme; the identity holds what decides the numbers before any weight is read.
    nlohmann::json description = s.at("description");
    if (description.is_object())
      for (const char* key : {"layers", "quantized_layers", "quantized_weight_bytes", "fp32_weight_bytes",
                              "weight_bytes_ratio", "model_linear_bytes", "model_linear_bytes_fp32",
                              "kv_cache_error"})  // a measurement over the windows run, like the scores
        description.erase(key);
    schemes.push_back({{"name", s.at("name")}, {"description", description}});
  }
  nlohmann::json options = record.at("options");
  for (const char* key : {"threads", "batch_size", "shard"}) options.erase(key);  // results do not depend on them
  return {{"model_weights", record.at("model").at("weights_hash")},
          // the hash's definition (loaders/checkpoints/weights_hash.h): hashes of two kinds never match
          {"model_weights_kind", recorded_weights_hash_kind(record.at("model"))},
          {"model_config", record.at("model").at("config")},
          {"model_transforms", record.at("model").value("transforms", nlohmann::json::array())},
          {"tokenizer", record.at("tokenizer").value("kind", "")},
          {"tokenizer_vocab", record.at("tokenizer").value("vocab_size", nlohmann::json(0))},  // compared as JSON, never cast
          {"data", record.at("data").at("hash")},
          {"data_options", {{"text_split", record.at("data").value("text_split", "")},
                            {"json_field", record.at("data").value("json_field", "")}}},
          {"protocol", protocol},
          {"precision", precision_identity(record.at("precision"))},
          {"options", options},
          {"schemes", schemes}};
}

nlohmann::json build_record(const RecordContext& context, const std::vector<SchemeInfo>& schemes,
                            const EvalResult& result, const std::vector<nlohmann::json>& statistics) {
  nlohmann::json record;
  record["schema_version"] = kRecordSchemaVersion;
  record["qeval"] = {{"version", version()}, {"git_commit", git_commit()}};
  record["created"] = utc_now();
  record["command"] = context.command;
  record["host"] = host_info();
  record["model"] = context.model;
  record["tokenizer"] = context.tokenizer;
  record["data"] = context.data;
  nlohmann::json protocol = context.protocol;
  protocol["windows"] = result.windows;
  protocol["scored_tokens"] = result.scored_tokens;
  protocol["token_stream_hash"] = result.token_stream_hash();
  record["protocol"] = protocol;
  // Each window's hash, so a reader can recompute token_stream_hash and tell which windows the
  // record holds (records/record_verify.h).
  nlohmann::json hashes = nlohmann::json::object();
  for (const auto& [index, hash] : result.window_hashes) hashes[std::to_string(index)] = hash_hex(hash);
  record["window_hashes"] = hashes;
  record["precision"] = context.precision;
  record["options"] = context.options;

  const SchemeSummary full = result.schemes.front().summary();
  nlohmann::json list = nlohmann::json::array();
  for (std::size_t i = 0; i < schemes.size(); ++i) {
    const SchemeResult& r = result.schemes[i];
    const SchemeSummary s = r.summary();
    nlohmann::json entry;
    entry["name"] = schemes[i].name;
    entry["description"] = schemes[i].description;
    entry["linear_weight_bytes"] = schemes[i].linear_weight_bytes;
    entry["perplexity"] = s.to_json();
    entry["vs_full"] = {{"dppl", s.ppl - full.ppl},
                        {"dppl_rel", full.ppl > 0 ? (s.ppl - full.ppl) / full.ppl : 0.0},
                        {"paired_dnll_mean", s.diff_mean},
                        {"paired_dnll_se", s.diff_se},
                        {"kl_mean", s.kl_mean},
                        {"top1_agreement", s.top1_agreement},
                        {"dp_correct_mean", s.dp_mean}};
    // Beyond the mean (docs/record.md): llama.cpp's --kl-divergence numbers with the percentiles
    // when the run kept the per-token values, and the penalty by position in the window.
    if (i > 0) {
      if (const auto tails = summarize_fidelity(r.rows)) entry["per_token"] = tails->to_json(r.kl_values, r.dp_values);
      const auto buckets = summarize_buckets(r.rows);
      if (!buckets.empty()) {
        nlohmann::json b = nlohmann::json::array();
        for (const BucketSummary& x : buckets) b.push_back(x.to_json());
        entry["position_buckets"] = b;
      }
    }
    entry["statistics"] = i < statistics.size() ? statistics[i] : nlohmann::json(nullptr);
    // Throughput counts every token run through the model (scored or not).
    entry["timing"] = {{"forward_seconds", r.forward_seconds},
                       {"tokens_per_second", r.forward_seconds > 0
                                                 ? static_cast<double>(result.processed_tokens) / r.forward_seconds
                                                 : 0.0}};
    nlohmann::json rows = nlohmann::json::object();
    for (const auto& [index, row] : r.rows) rows[std::to_string(index)] = row.to_json();
    entry["per_window"] = rows;
    list.push_back(entry);
  }
  record["schemes"] = list;
  record["timing"] = {{"total_seconds", result.seconds}};
  // A folder name, an argument or a GGUF string that is not UTF-8 is kept, escaped (\xHH), so the
  // record (and the state's identity built from it) can always be written.
  return utf8_safe(record);
}

void write_record(const std::filesystem::path& path, const nlohmann::json& record) {
  write_file_atomic(path, json_dump(record, 2) + "\n");
}

nlohmann::json read_record(const std::filesystem::path& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a qeval result record (invalid JSON: {})", path.string(), e.what());
  }
  QEVAL_CHECK(j.is_object() && j.contains("schema_version"), "{}: not a qeval result record (no schema_version)",
              path.string());
  const std::int64_t v = json_integer(j["schema_version"], path.string() + ": schema_version");
  QEVAL_CHECK(v == kRecordSchemaVersion, "{}: record schema_version {} is not supported (expected {})", path.string(), v,
              kRecordSchemaVersion);
  return j;
}

const std::vector<std::pair<std::string, std::vector<std::string>>>& statistic_names() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> names = {
      {"kurtosis_first", {"hidden", "kurtosis", "first"}},
      {"kurtosis_rest", {"hidden", "kurtosis", "rest"}},
      {"max_abs_first", {"hidden", "max_abs", "first"}},
      {"max_abs_rest", {"hidden", "max_abs", "rest"}},
      {"inf_over_l2_first", {"hidden", "inf_over_l2", "first"}},
      {"inf_over_l2_rest", {"hidden", "inf_over_l2", "rest"}},
      {"first_attn_pct", {"attention", "first_attn_pct"}},
      {"first_token_share", {"attention", "first_token_share"}},
      {"sink_rate_pct", {"attention", "sink_rate_pct"}},
      {"attention_entropy", {"attention", "entropy"}}};
  return names;
}

}  // namespace qeval
