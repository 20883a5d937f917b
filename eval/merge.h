// Merging shard records (`qeval eval --shard i/n`) into exactly the record one run gives:
// same per-window scores, reduced in the same window order, so PPL, errors, statistics and the
// token-stream hash are bit-identical. Only timings, host and command differ.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qeval {

// `shards[i]` read from `paths[i]` (for messages). Throws naming the file when a record is not
// a shard, when shards disagree on what they evaluated, when one is missing or repeated.
nlohmann::json merge_shard_records(const std::vector<nlohmann::json>& shards, const std::vector<std::string>& paths);

}  // namespace qeval
