// Where in a window the penalty falls (issue 80, item 3): scored tokens grouped by their
// prediction position p, 0-based (the distribution computed at token p, predicting token p + 1;
// p = 0 is the first token, the attention sink), in buckets doubling in width:
//   bucket 0: p = 0   bucket 1: p = 1   bucket 2: p = 2–3   bucket 3: p = 4–7   …   bucket k: 2^(k−1) … 2^k − 1
// up to the window's last prediction. Per bucket, over the windows in ascending index order:
// the paired ΔNLL mean with its standard error (per token, as the overall one) and the mean KL.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/token_scores.h"

namespace qeval {

int position_bucket(std::int64_t p);
std::int64_t bucket_first(int bucket);
std::int64_t bucket_last(int bucket);
std::string bucket_label(int bucket);  // "0", "1", "2–3", "256–511"

struct BucketSummary {
  int bucket = 0;
  std::int64_t tokens = 0;
  double diff_mean = 0, diff_se = 0, kl_mean = 0;
  nlohmann::json to_json() const;  // {"positions": [first, last], "label", "tokens", "paired_dnll_mean", ...}
};

// The non-empty buckets of a scheme's rows (none when a row has no buckets: full precision, or a
// record written before them).
std::vector<BucketSummary> summarize_buckets(const std::map<std::int64_t, WindowScores>& rows);

}  // namespace qeval
