// Result records (DESIGN.md §9): one JSON document per `qeval eval`, carrying the build, the
// host, the model, the data, the protocol and, per scheme, the resolved spec, execution path,
// perplexity with its error, the comparison with full precision, statistics and timings.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/evaluator.h"

namespace qeval {

inline constexpr int kRecordSchemaVersion = 1;

struct RecordContext {
  std::vector<std::string> command;  // argv
  nlohmann::json model;              // path, format, weights_hash (+ weights_hash_kind: docs/weights-hash.md), config, parameters, notes
  nlohmann::json tokenizer;          // path, kind, vocab_size
  nlohmann::json data;               // path, format, hash, text_split, documents
  nlohmann::json protocol;           // ProtocolSpec::to_json() (+ filled in: windows, tokens, hash)
  nlohmann::json precision;          // {"dtype": "fp32", "device": "cpu"}
  nlohmann::json options;            // batch size, threads, ...
};

// What a record says about each scheme besides its scores.
struct SchemeInfo {
  std::string name;
  nlohmann::json description;  // resolved spec + execution report
  std::int64_t linear_weight_bytes = 0;
};
std::vector<SchemeInfo> scheme_infos(const std::vector<EvalScheme>& schemes, const std::vector<std::int64_t>& linear_weight_bytes);
// Read back from a record's "schemes" list.
std::vector<SchemeInfo> scheme_infos(const nlohmann::json& record);

// `statistics[i]` (may be null) is scheme i's statistics summary.
nlohmann::json build_record(const RecordContext& context, const std::vector<SchemeInfo>& schemes,
                            const EvalResult& result, const std::vector<nlohmann::json>& statistics);

// The parts of a record that must agree for two records (or a record and a resume state, or
// shards) to describe the same evaluation: model weights, tokenizer, data, protocol parameters,
// precision, schemes and statistics options. Counts, hashes of results and timings excluded.
nlohmann::json evaluation_identity(const nlohmann::json& record);

// What of a record's "precision" decides its numbers: the dtype and the device ("cpu" when a record
// older than --device does not say). The descriptive fields (the GPU's name and versions, notes)
// are left out, so records compare across them.
nlohmann::json precision_identity(const nlohmann::json& precision);

// Writes atomically (temp file + rename): the record is complete or absent.
void write_record(const std::filesystem::path& path, const nlohmann::json& record);
// Reads and checks schema_version; throws naming the file.
nlohmann::json read_record(const std::filesystem::path& path);

// Statistic names and where they live in a statistics summary (stats/statistics.h).
const std::vector<std::pair<std::string, std::vector<std::string>>>& statistic_names();

}  // namespace qeval
