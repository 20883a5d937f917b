// `qeval compare`'s view beyond the mean (issue 80): per quantised scheme of each record, the
// per-token comparison with full precision in llama.cpp's `llama-perplexity --kl-divergence`
// layout (its "KL divergence statistics" and "Token probability statistics" blocks, the same
// lines and units: KL in nats, Δp in percent), with the reverse KL and the top-1 flips after; and
// the paired ΔNLL and mean KL by position bucket (eval/position_buckets.h).
// Records or schemes without these sections are left out; both are empty strings when none has them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/compare.h"

namespace qeval {

// One fenced block per (record, scheme) under a heading.
std::string kl_divergence_blocks_markdown(const std::vector<LabeledRecord>& records);

// Per record: | positions | tokens | <scheme> ΔNLL ± se | <scheme> KL | … |, one row per bucket.
std::string position_buckets_markdown(const std::vector<LabeledRecord>& records);

// {"model", "record", "scheme", "per_token", "position_buckets"} per quantised scheme that has either.
nlohmann::json tails_json(const std::vector<LabeledRecord>& records);

}  // namespace qeval
