// Attention statistics in sliding-window layers (stats/attention_stats.h): only the queries whose
// window contains key 1 count for first-token attention and the sink rate; a global layer of the
// same model is unchanged; the collector records the windows, merges only like with like, and its
// state keeps them.
#include <gtest/gtest.h>

#include "stats/statistics.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

// Uniform attention over each query's visible keys: causal, and within `window` when > 0.
at::Tensor uniform_attention(std::int64_t L, std::int64_t window) {
  at::Tensor p = at::zeros({1, 2, L, L}, at::kDouble);
  for (std::int64_t i = 0; i < L; ++i) {
    const std::int64_t first = window > 0 ? std::max<std::int64_t>(0, i - window + 1) : 0;
    p.narrow(2, i, 1).narrow(3, first, i - first + 1).fill_(1.0 / static_cast<double>(i - first + 1));
  }
  return p;
}

TEST(WindowStatistics, OnlyQueriesThatSeeKeyOneCount) {
  const std::int64_t L = 12, w = 4;
  const auto windowed = attention_layer_stats(uniform_attention(L, w), 64, 0.3, 0, w);
  // Queries 2..4 (1-based) see key 1 with weight 1/i; queries 5..12 cannot see it and are left out.
  const double share = (1.0 / 2 + 1.0 / 3 + 1.0 / 4) / 3;
  EXPECT_NEAR(windowed[0].first_share, share, 1e-12);
  EXPECT_NEAR(windowed[0].first_attn, share, 1e-12);  // every visible key ties: credit 1/i
  // Sink: T' = min(64, 12, 4) = 4, α₁ = (1 + 1/2 + 1/3 + 1/4) / 4 = 0.52 > 0.3.
  EXPECT_EQ(windowed[0].sink_fraction, 1.0);
  // Read as a global layer, the same weights would count the zeros of queries 5..12 as misses.
  const auto global = attention_layer_stats(uniform_attention(L, w), 64, 0.3);
  EXPECT_NEAR(global[0].first_share, (1.0 / 2 + 1.0 / 3 + 1.0 / 4) / 11, 1e-12);
  EXPECT_EQ(global[0].entropy, windowed[0].entropy);  // entropy: all queries either way
  // A window of 1 leaves no query i ≥ 2 that sees key 1.
  EXPECT_TRUE(std::isnan(attention_layer_stats(uniform_attention(L, 1), 64, 0.3, 0, 1)[0].first_attn));
}

TEST(WindowStatistics, CollectorUsesEachLayersWindowAndRecordsThem) {
  const std::int64_t L = 12;
  StatisticsOptions options;
  options.attention_windows = {4, 0};
  StatisticsCollector c(options);
  c.begin_batch({0});
  c.on_attention(0, uniform_attention(L, 4));
  c.on_block_output(0, at::randn({1, L, 8}));
  c.on_attention(1, uniform_attention(L, 0));
  c.on_block_output(1, at::randn({1, L, 8}));
  const nlohmann::json a = c.summary().at("attention");
  EXPECT_EQ(a.at("attention_windows"), nlohmann::json({4, 0}));
  EXPECT_TRUE(a.contains("sliding_window_layers"));
  double global_share = 0;
  for (std::int64_t i = 2; i <= L; ++i) global_share += 1.0 / static_cast<double>(i) / static_cast<double>(L - 1);
  EXPECT_NEAR(a.at("per_layer").at("first_token_share")[0].get<double>(), (1.0 / 2 + 1.0 / 3 + 1.0 / 4) / 3, 1e-9);
  EXPECT_NEAR(a.at("per_layer").at("first_token_share")[1].get<double>(), global_share, 1e-9);

  const StatisticsCollector back = StatisticsCollector::state_from_json(c.state_to_json(), "state");
  EXPECT_EQ(back.options().attention_windows, options.attention_windows);
  EXPECT_EQ(back.summary(), c.summary());
  StatisticsCollector other;  // all layers global: not the same statistics
  EXPECT_TRUE(test::throws_with([&] { other.merge(c); }, {"merge", "attention windows"}));
}

}  // namespace
}  // namespace qeval
