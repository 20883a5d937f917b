#include "eval/position_buckets.h"

#include <fmt/format.h>

#include <cmath>

#include "common/error.h"

namespace qeval {

int position_bucket(std::int64_t p) {
  QEVAL_CHECK(p >= 0, "position_bucket: position {} is negative", p);
  int k = 0;
  while (p > 0) {
    p >>= 1;
    ++k;
  }
  return k;  // ⌊log2 p⌋ + 1 for p ≥ 1
}

std::int64_t bucket_first(int bucket) { return bucket == 0 ? 0 : std::int64_t{1} << (bucket - 1); }
std::int64_t bucket_last(int bucket) { return bucket == 0 ? 0 : (std::int64_t{1} << bucket) - 1; }

std::string bucket_label(int bucket) {
  const std::int64_t a = bucket_first(bucket), b = bucket_last(bucket);
  return a == b ? std::to_string(a) : fmt::format("{}–{}", a, b);
}

nlohmann::json BucketSummary::to_json() const {
  return {{"positions", {bucket_first(bucket), bucket_last(bucket)}},
          {"label", bucket_label(bucket)},
          {"tokens", tokens},
          {"paired_dnll_mean", diff_mean},
          {"paired_dnll_se", diff_se},
          {"kl_mean", kl_mean}};
}

std::vector<BucketSummary> summarize_buckets(const std::map<std::int64_t, WindowScores>& rows) {
  std::vector<BucketScores> total;
  for (const auto& [index, r] : rows) {  // ascending window index, as every other sum
    if (r.buckets.empty()) return {};
    if (total.size() < r.buckets.size()) total.resize(r.buckets.size());
    for (std::size_t k = 0; k < r.buckets.size(); ++k) {
      total[k].tokens += r.buckets[k].tokens;
      total[k].diff_sum += r.buckets[k].diff_sum;
      total[k].diff_sq_sum += r.buckets[k].diff_sq_sum;
      total[k].kl_sum += r.buckets[k].kl_sum;
    }
  }
  std::vector<BucketSummary> out;
  for (std::size_t k = 0; k < total.size(); ++k) {
    const BucketScores& t = total[k];
    if (t.tokens == 0) continue;
    BucketSummary s;
    s.bucket = static_cast<int>(k);
    s.tokens = t.tokens;
    const double n = static_cast<double>(t.tokens);
    s.diff_mean = t.diff_sum / n;
    // As token_scores.cpp's standard error: sample variance over n.
    if (t.tokens >= 2) {
      const double var = (t.diff_sq_sum - n * s.diff_mean * s.diff_mean) / (n - 1);
      s.diff_se = std::sqrt(std::max(var, 0.0) / n);
    }
    s.kl_mean = t.kl_sum / n;
    out.push_back(s);
  }
  return out;
}

}  // namespace qeval
