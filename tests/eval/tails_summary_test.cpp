// Position buckets and llama.cpp's summary numbers of the per-token comparison
// (eval/position_buckets.h, eval/fidelity_summary.h), by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/fidelity_summary.h"
#include "eval/position_buckets.h"

namespace qeval {
namespace {

TEST(PositionBuckets, DoubleInWidthFromTheFirstToken) {
  EXPECT_EQ(position_bucket(0), 0);
  EXPECT_EQ(position_bucket(1), 1);
  EXPECT_EQ(position_bucket(2), 2);
  EXPECT_EQ(position_bucket(3), 2);
  EXPECT_EQ(position_bucket(4), 3);
  EXPECT_EQ(position_bucket(7), 3);
  EXPECT_EQ(position_bucket(8), 4);
  EXPECT_EQ(position_bucket(511), 9);
  EXPECT_EQ(bucket_label(0), "0");
  EXPECT_EQ(bucket_label(2), "2–3");
  EXPECT_EQ(bucket_label(9), "256–511");
  // Two windows; bucket 2 has ΔNLL 0.1, 0.3 (window 0) and 0.2 (window 1), bucket 0 is empty.
  std::map<std::int64_t, WindowScores> rows;
  rows[0].buckets = {{}, {1, -0.5, 0.25, 0.5}, {2, 0.4, 0.1, 0.2}};
  rows[1].buckets = {{}, {1, 0.5, 0.25, 0.5}, {1, 0.2, 0.04, 0.1}};
  const auto s = summarize_buckets(rows);
  ASSERT_EQ(s.size(), 2u);  // empty buckets are left out
  EXPECT_EQ(s[0].bucket, 1);
  EXPECT_EQ(s[0].tokens, 2);
  EXPECT_NEAR(s[0].diff_mean, 0.0, 1e-15);
  EXPECT_NEAR(s[0].diff_se, std::sqrt(0.5 / 2), 1e-12);  // sample variance (0.25 + 0.25) / 1, over n = 2
  EXPECT_NEAR(s[1].diff_mean, 0.2, 1e-15);
  EXPECT_NEAR(s[1].diff_se, std::sqrt(0.01 / 3), 1e-12);  // variance ((-0.1)² + 0.1² + 0) / 2 = 0.01
  EXPECT_NEAR(s[1].kl_mean, 0.1, 1e-15);
  EXPECT_EQ(s[1].to_json()["positions"], nlohmann::json::array({2, 3}));
}

TEST(FidelitySummary, LlamaCppsUncertaintiesByHand) {
  // llama.cpp: no uncertainty at 10 tokens or fewer.
  EXPECT_EQ(llama_mean_and_uncertainty(5.0, 5.0, 10).uncertainty, 0.0);
  // 20 tokens, half 0 and half 1: mean 0.5, Σx²/n − f² = 0.25, sqrt(0.25 / 19).
  const ValueAndUncertainty u = llama_mean_and_uncertainty(10.0, 10.0, 20);
  EXPECT_EQ(u.value, 0.5);
  EXPECT_NEAR(u.uncertainty, std::sqrt(0.25 / 19), 1e-15);
  EXPECT_NEAR(rate_and_uncertainty(15, 20).uncertainty, std::sqrt(0.75 * 0.25 / 19), 1e-15);
  // One window of 20 tokens: Δp = ±0.1 alternating; 18 agreeing; 2 lost, 1 gained.
  std::map<std::int64_t, WindowScores> rows;
  WindowScores& r = rows[0];
  r.tokens = 20;
  r.dp_sum = 0;
  r.dp_sq_sum = 20 * 0.01;
  r.dp_4_sum = 20 * 1e-4;
  r.top1_agree = 18;
  r.top1_lost = 2;
  r.top1_gained = 1;
  r.kl_sum = 2.0;
  r.kl_sq_sum = 0.4;
  const FidelitySummary s = *summarize_fidelity(rows);
  EXPECT_NEAR(s.dp_rms.value, 0.1, 1e-15);
  EXPECT_NEAR(s.dp_rms.uncertainty, 0.0, 1e-6);  // every Δp² equal: no spread (but rounding)
  EXPECT_NEAR(s.kl.value, 0.1, 1e-15);
  EXPECT_NEAR(s.kl.uncertainty, std::sqrt((0.02 - 0.01) / 19), 1e-12);
  EXPECT_NEAR(s.same_top.value, 0.9, 1e-15);
  EXPECT_NEAR(s.top1_lost.value, 0.1, 1e-15);
  EXPECT_EQ(s.gained, 1);
  rows[1].tails = false;  // a row written before the tails: no summary
  EXPECT_FALSE(summarize_fidelity(rows).has_value());
}

}  // namespace
}  // namespace qeval
