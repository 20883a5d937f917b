// Per-window scores of one scheme, and how they combine into perplexity, its standard error
// and the paired comparison with full precision (DESIGN.md §4, §6).
//
// Every window contributes one WindowScores row of float64 sums over its scored tokens. Rows
// are reduced in ascending window index order only, so a run split into shards, or resumed
// after a kill, gives bit-identical totals to one uninterrupted run.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <vector>
#include <nlohmann/json.hpp>

namespace qeval {

// Sums over one window's scored tokens whose prediction position p (0-based: the distribution
// computed at token p, predicting token p + 1) falls in one position bucket (eval/position_buckets.h).
struct BucketScores {
  std::int64_t tokens = 0;
  double diff_sum = 0, diff_sq_sum = 0, kl_sum = 0;
  bool operator==(const BucketScores& o) const {
    return tokens == o.tokens && diff_sum == o.diff_sum && diff_sq_sum == o.diff_sq_sum && kl_sum == o.kl_sum;
  }
};

struct WindowScores {
  std::int64_t tokens = 0;
  double nll_sum = 0, nll_sq_sum = 0;  // per-token negative log-likelihood (nats)
  // Against full precision (zero for the full-precision scheme itself):
  double diff_sum = 0, diff_sq_sum = 0;  // d = nll_scheme − nll_full per token
  double kl_sum = 0;                     // KL(P_full ‖ P_scheme) per token, nats
  std::int64_t top1_agree = 0;           // argmax equal
  double dp_sum = 0;                     // p_scheme(correct) − p_full(correct)
  // The tails (issue 80): sums llama.cpp's uncertainties need, the reverse KL, top-1 flips, and
  // the paired sums by position bucket. A row of a record written before them has tails = false.
  bool tails = true;
  double kl_sq_sum = 0;                  // Σ KL²
  double rkl_sum = 0, rkl_sq_sum = 0;    // KL(P_scheme ‖ P_full) per token, and its squares
  double dp_sq_sum = 0, dp_4_sum = 0;    // Σ Δp², Σ Δp⁴ (RMS Δp and its uncertainty)
  std::int64_t top1_lost = 0;            // full precision's top-1 is the target, the scheme's is not
  std::int64_t top1_gained = 0;          // the scheme's top-1 is the target, full precision's is not
  std::vector<BucketScores> buckets;     // by position bucket; empty for full precision itself

  nlohmann::json to_json() const;
  static WindowScores from_json(const nlohmann::json& j);
};

// Rows are made per batch by eval/vocab_scoring.h (window_rows).

struct SchemeSummary {
  std::int64_t windows = 0, tokens = 0;
  double nll_mean = 0, nll_se = 0;  // standard error of the mean per-token NLL
  double ppl = 0, ppl_low = 0, ppl_high = 0;  // exp(mean), exp(mean ∓ 1.96·se)
  double diff_mean = 0, diff_se = 0;          // paired ΔNLL vs full
  double kl_mean = 0, top1_agreement = 0, dp_mean = 0;
  nlohmann::json to_json() const;
};

// Reduces rows keyed by window index, in ascending index order.
SchemeSummary summarize(const std::map<std::int64_t, WindowScores>& rows);

}  // namespace qeval
