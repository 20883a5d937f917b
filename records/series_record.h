// The series record (issue 44): what `qeval eval --model SERIES --out S.json` writes beside the
// per-checkpoint records S/step-N.json, and what `compare`, `plot` and `check` read for a
// trajectory. It holds no timings or dates, so an interrupted and resumed series ends with the
// same bytes as an uninterrupted one.
//
// {
//   "kind": "qeval series", "series_version": 1,
//   "source": {"path": the --model argument, "format": "qeval step-N" | "hf-trainer checkpoint-N" | "list"},
//   "settings": {option: value}      the options that decide the numbers (cli/eval_series.cpp);
//                                     a rerun into the same --out must have the same
//   "evaluation": evaluation_identity of the records without the model (protocol with its
//                 token_stream_hash, data, precision, options, schemes): one for every checkpoint
//   "checkpoints": [                 by step
//     {"step", "tokens" (null: unknown), "name", "model" (path), "weights_hash",
//      "record": path of the checkpoint's record, relative to the series record's folder,
//      "training": {"lr", "val_loss", "train_loss", "warmup", "total_steps"} (null: unknown),
//      "schemes": [{"name", "ppl", "nll_mean", "nll_se", "dppl", "paired_dnll_mean",
//                   "paired_dnll_se", "kl_mean", "top1_agreement"}],
//      "statistics": {scheme: {kurtosis_first, kurtosis_rest, max_abs_first, max_abs_rest,
//                              inf_over_l2_first, inf_over_l2_rest, first_attn_pct,
//                              first_token_share, sink_rate_pct, attention_entropy}}}
//   ]
// }
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/series_source.h"

namespace qeval {

inline constexpr int kSeriesVersion = 1;

// A record's evaluation_identity without what belongs to the model (weights, config): what every
// checkpoint of a series shares, the protocol's token_stream_hash included (same windows).
nlohmann::json series_evaluation_identity(const nlohmann::json& record);

// One checkpoint's entry, from its listing and its record; `record_path` as the series stores it.
nlohmann::json series_entry(const SeriesCheckpoint& checkpoint, const nlohmann::json& record,
                            const std::string& record_path);

// The series record from entries sorted by step. Throws when two entries' evaluations differ
// (naming the steps and the fields) or two share a step.
nlohmann::json build_series_record(const SeriesListing& listing, const std::string& source_argument,
                                   const nlohmann::json& settings, const std::vector<nlohmann::json>& evaluations,
                                   const std::vector<nlohmann::json>& entries);

// Whether a JSON document is a series record (as opposed to a single result record).
bool is_series_record(const nlohmann::json& j);
// Reads a file that should be a series record; throws naming it when it is not one.
nlohmann::json read_series_record(const std::filesystem::path& path);
// read_series_record, then the series checked against the checkpoints' records it points at
// (issue 51: a series is verified, not trusted, before compare, check or plot use its numbers):
// steps strictly increase, tokens seen never decrease, no record file serves two steps; each
// entry's record exists, verifies (records/record_verify.h; shards and partial merges refused),
// is the record of the entry's model, was evaluated as the series says (its evaluation identity),
// and rebuilds the entry exactly (series_entry: every penalty, perplexity, statistic and the
// weights hash). Throws naming the series file, the step and what differs.
nlohmann::json read_verified_series_record(const std::filesystem::path& path);
// True when `path` holds a series record (cheap enough to ask for every argument of compare).
bool is_series_record_file(const std::filesystem::path& path);

// The checkpoint's record a series entry points at (its path resolved against the series file).
nlohmann::json read_series_checkpoint_record(const std::filesystem::path& series_path, const nlohmann::json& entry);

// A run's name for tables and legends: the source folder's (or list file's) name.
std::string series_label(const nlohmann::json& series);

}  // namespace qeval
