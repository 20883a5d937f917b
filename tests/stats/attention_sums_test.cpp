// The collector's fused path on the host side (issue 43): per-head sums as the fused GPU kernel
// delivers them (model/observer.h, AttentionSums) give the same per-sequence statistics as the
// probabilities do through on_attention, for global and windowed layers and with ties; the summary
// names the path, and the path counts survive the state round trip and merging. The sums are made
// here from the probabilities with a plain loop of DESIGN.md §6 (the GPU kernel itself is tested
// against its own float64 reference in tests/kernels/cuda_fused_attention_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "stats/attention_stats.h"
#include "stats/statistics.h"

namespace qeval {
namespace {

using nlohmann::json;

// probs [B, H, L, L] (float, causal) → [B, H, 4] float64: Σ_{i<T'} A[i,0], Σ_{1≤i<reach} A[i,0],
// Σ_{1≤i<reach} credit, Σ_i entropy (0-based i), with the collector's tie rule on the float weights.
at::Tensor head_sums(const at::Tensor& probs, std::int64_t window, std::int64_t sink_T) {
  const std::int64_t B = probs.size(0), H = probs.size(1), L = probs.size(2);
  const std::int64_t reach = window > 0 ? std::min(L, window) : L, T = std::min(sink_T, reach);
  at::Tensor out = at::zeros({B, H, 4}, at::kDouble);
  auto p = probs.accessor<float, 4>();
  auto o = out.accessor<double, 3>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < L; ++i) {
        float top = 0;
        double entropy = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          top = std::max(top, p[b][h][i][j]);
          if (p[b][h][i][j] > 0) entropy -= static_cast<double>(p[b][h][i][j]) * std::log(static_cast<double>(p[b][h][i][j]));
        }
        double credit = 0;
        if (p[b][h][i][0] >= top) {
          std::int64_t tied = 0;
          for (std::int64_t j = 0; j <= i; ++j) tied += p[b][h][i][j] == top;
          credit = 1.0 / static_cast<double>(top > 0 ? tied : i + 1);
        }
        if (i < T) o[b][h][0] += p[b][h][i][0];
        if (i >= 1 && i < reach) {
          o[b][h][1] += p[b][h][i][0];
          o[b][h][2] += credit;
        }
        o[b][h][3] += entropy;
      }
  return out;
}

// Causal softmax of random logits, some rows with exact ties on key 1, a window mask when w > 0.
at::Tensor random_probs(std::int64_t B, std::int64_t H, std::int64_t L, std::int64_t window, std::uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor logits = at::randn({B, H, L, L}) * 2;
  logits.select(-1, 0).add_(1.5);
  if (L >= 2)  // ties with key 1 on half the rows
    logits.narrow(-2, 0, L / 2).select(-1, 1).copy_(logits.narrow(-2, 0, L / 2).select(-1, 0));
  at::Tensor i = at::arange(L).unsqueeze(1), j = at::arange(L).unsqueeze(0);
  at::Tensor hidden = j > i;
  if (window > 0) hidden = hidden.logical_or(i - j >= window);
  return at::softmax(logits.masked_fill(hidden, -std::numeric_limits<float>::infinity()), -1);
}

void expect_close(const AttentionLayerStats& got, const AttentionLayerStats& want) {
  auto close = [](double g, double w) { return (std::isnan(g) && std::isnan(w)) || std::abs(g - w) <= 1e-12 * (1 + std::abs(w)); };
  EXPECT_TRUE(close(got.first_attn, want.first_attn)) << got.first_attn << " vs " << want.first_attn;
  EXPECT_TRUE(close(got.first_share, want.first_share)) << got.first_share << " vs " << want.first_share;
  EXPECT_EQ(got.sink_fraction, want.sink_fraction);
  // The collector sums p·log p in the weights' float32; the sums here are float64.
  EXPECT_NEAR(got.entropy, want.entropy, 1e-6 * (1 + std::abs(want.entropy)));
}

TEST(AttentionSums, GiveTheStatisticsOfTheProbabilities) {
  for (std::int64_t window : {0, 1, 5, 40})
    for (std::int64_t L : {1, 2, 13, 30}) {
      SCOPED_TRACE("window " + std::to_string(window) + ", L " + std::to_string(L));
      const at::Tensor probs = random_probs(3, 4, L, window, static_cast<std::uint64_t>(L * 10 + window));
      const std::int64_t sink_T = 7;
      const auto want = attention_layer_stats(probs, sink_T, 0.3, 0, window);
      const auto got = attention_layer_stats_from_sums(head_sums(probs, window, sink_T), L, window, sink_T, 0.3);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t b = 0; b < got.size(); ++b) expect_close(got[b], want[b]);
    }
}

// One collector fed probabilities, one fed the sums: the same summary, and each names its path.
TEST(AttentionSums, CollectorSummaryMatchesAndNamesThePath) {
  StatisticsOptions options;
  options.sink_T = 5;
  options.attention_windows = {0, 6};
  StatisticsCollector unfused(options), fused(options);
  at::manual_seed(3);
  const std::int64_t B = 2, L = 12;
  for (std::int64_t batch = 0; batch < 2; ++batch) {
    unfused.begin_batch({2 * batch, 2 * batch + 1});
    fused.begin_batch({2 * batch, 2 * batch + 1});
    for (std::int64_t layer = 0; layer < 2; ++layer) {
      const std::int64_t window = options.attention_windows[static_cast<std::size_t>(layer)];
      const at::Tensor probs = random_probs(B, 3, L, window, static_cast<std::uint64_t>(batch * 2 + layer));
      unfused.on_attention(layer, probs);
      AttentionSumsRequest request;
      ASSERT_TRUE(fused.wants_attention_sums(layer, &request));
      EXPECT_EQ(request.sink_T, 5);
      EXPECT_EQ(request.window, window);
      fused.on_attention_sums(layer, AttentionSums{head_sums(probs, request.window, request.sink_T), L, request.window,
                                                   request.sink_T});
      const at::Tensor hidden = at::randn({B, L, 16});
      unfused.on_block_output(layer, hidden);
      fused.on_block_output(layer, hidden);
    }
  }
  json a = unfused.summary(), b = fused.summary();
  EXPECT_EQ(a.at("attention_statistics"), "unfused");
  EXPECT_EQ(b.at("attention_statistics"), "fused-cuda");
  EXPECT_EQ(a.at("hidden_statistics"), "unfused");  // CPU tensors: the ATen reductions
  for (const char* key : {"first_attn_pct", "first_token_share", "sink_rate_pct", "entropy"})
    EXPECT_NEAR(a["attention"][key].get<double>(), b["attention"][key].get<double>(),
                (std::string(key) == "entropy" ? 1e-6 : 1e-12) * (1 + std::abs(a["attention"][key].get<double>())))
        << key;

  // The path counts round-trip and merge.
  const StatisticsCollector back = StatisticsCollector::state_from_json(fused.state_to_json(), "test");
  EXPECT_EQ(back.summary(), fused.summary());
  StatisticsCollector mixed = StatisticsCollector::state_from_json(unfused.state_to_json(), "test");
  StatisticsCollector other(options);
  other.begin_batch({10});
  for (std::int64_t layer = 0; layer < 2; ++layer) {
    const std::int64_t window = options.attention_windows[static_cast<std::size_t>(layer)];
    other.on_attention_sums(layer, AttentionSums{head_sums(random_probs(1, 3, L, window, 9), window, 5), L, window, 5});
    other.on_block_output(layer, at::randn({1, L, 16}));
  }
  mixed.merge(other);
  EXPECT_EQ(mixed.summary().at("attention_statistics"), "fused-cuda and unfused");
}

TEST(AttentionSums, TurnedOffWhenAskedTo) {
  StatisticsOptions options;
  options.fused = false;
  StatisticsCollector c(options);
  AttentionSumsRequest request;
  EXPECT_FALSE(c.wants_attention_sums(0, &request));
  options.fused = true;
  options.attention = false;
  EXPECT_FALSE(StatisticsCollector(options).wants_attention_sums(0, &request));
}

}  // namespace
}  // namespace qeval
