// Merging shard records (`qeval eval --shard i/n`) into exactly the record one run gives:
// same per-window scores, reduced in the same window order, so PPL, errors, statistics and the
// token-stream hash are bit-identical. Only timings, host and command differ.
//
// Every shard is verified first (records/record_verify.h: rows in their domains, summaries equal to
// what the rows give, windows its own, its state equal to its rows), then the shards together
// must hold every window the protocol gave (as the shards recorded it: protocol_windows) — unless
// `allow_partial`, which writes a record marked "partial" with what is missing.
// The KL and Δp percentiles come from the shards' per-token values beside them (<shard>.tokens/,
// eval/token_values_file.h), each held to its shard's rows to the bit: the same numbers one run
// gives. When a shard's folder is absent the merged record has no percentiles and lists the
// missing folders under "per_token_values_missing".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qeval {

// `shards[i]` read from `paths[i]` (for messages). Throws naming the file when a record is not
// a shard, when shards disagree on what they evaluated, when one is missing or repeated, or when
// a shard does not hold what it claims.
nlohmann::json merge_shard_records(const std::vector<nlohmann::json>& shards, const std::vector<std::string>& paths,
                                   bool allow_partial = false);

}  // namespace qeval
