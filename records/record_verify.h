// Records verified, not trusted. `merge`, `check`, `compare` and `plot` read result records that
// anyone may have edited, truncated or produced half-way; before a number from a record is used,
// the record must agree with itself:
//   - every per-window row is in its domain (records/window_rows.h), every scheme holds the same
//     windows with the same scored-token counts;
//   - the counts (windows, scored tokens) are those of the rows, the token-stream hash is the one
//     the window hashes give (records since window_hashes was added), and each window scores what
//     the protocol scores (windows, gptq-c4: seq_len − 1; llamacpp: n_ctx − n_ctx/2 − 1; stride:
//     1 .. seq_len − 1);
//   - the window indices are those the protocol gives (sequential protocols: 0..n−1; gptq-c4:
//     0..max_windows−1; never more than max_windows), a shard's windows are its own (index % n)
//     and, where the shard record says how many windows the protocol gave, all of them;
//   - every summary (perplexity, its error and interval, every comparison with full precision,
//     the statistics' window count) is recomputed from the rows and must match (1e-9 relative);
//   - every perplexity is a finite number;
//   - every statistic lies in its domain and covers the model's layers of its kind
//     (records/statistics_verify.h);
//   - every rounding variant belongs to a scheme of the record, with the run's ε, and every band
//     summary is the one its variants give (records/rounding_band.h);
//   - the timings are measurements: finite, ≥ 0, the phases adding up to the total and the
//     per-scheme phases within theirs (records/timings_verify.h);
//   - every scheme's own sections agree with its spec: a preset's name holds the preset, static
//     scales, KV-cache errors, tensor types and byte counts (records/scheme_sections_verify.h).
// Every reader (compare, check, plot, merge, the series reader) verifies through here, so what one
// refuses, all refuse, with the same message (naming the file and the key).
// A record that passes may still be partial: a shard, or a record that says it covers fewer
// windows than its protocol gives. Commands refuse partial records unless told --allow-partial.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qeval {

struct RecordVerification {
  std::int64_t windows = 0;
  // Why the record does not stand for the protocol's whole window set (empty: it does).
  std::vector<std::string> partial;
};

// Throws qeval::Error naming `source` and what disagrees.
RecordVerification verify_record(const nlohmann::json& record, const std::string& source);

// verify_record(); a partial record is refused (naming why) unless `allow_partial`, in which case
// the reasons come back as notes ("<source>: shard 0/2").
std::vector<std::string> require_verified_record(const nlohmann::json& record, const std::string& source,
                                                 bool allow_partial);

// The resolved definitions of the schemes two records share by name, where they differ
// ("int8-coarse: scheme.weights.granularity: \"tensor\" vs \"channel\""): the spec without its
// free-text description, for a rounding variant the scheme it varies with its seed and ε, and for
// static scales the data (hash) and windows they were calibrated on.
// Empty when every shared scheme is defined the same way.
std::vector<std::string> scheme_definition_differences(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace qeval
