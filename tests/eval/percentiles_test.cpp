// llama.cpp's percentile rule (eval/percentiles.h): by hand, against a transcription of llama.cpp's
// code (tests/oracle/percentiles_oracle.py, its output committed as percentiles_fixture.json), and
// the streamed selection against sorting in memory, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>

#include "common/files.h"
#include "eval/percentiles.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

std::size_t level(const char* name) {
  const auto& l = percentile_levels();
  for (std::size_t k = 0; k < l.size(); ++k)
    if (std::string(l[k].name) == name) return k;
  ADD_FAILURE() << "no level " << name;
  return 0;
}

// A source handing the values over in chunks of `chunk`, as a file reader would.
ValueSource chunked(const std::vector<double>& v, std::size_t chunk) {
  return [&v, chunk](const ValueChunk& visit) {
    for (std::size_t i = 0; i < v.size(); i += chunk) visit(v.data() + i, std::min(chunk, v.size() - i));
  };
}

void expect_same_bits(const Distribution& a, const Distribution& b, const std::string& what) {
  EXPECT_EQ(a.count, b.count) << what;
  EXPECT_EQ(a.min, b.min) << what;
  EXPECT_EQ(a.max, b.max) << what;
  EXPECT_EQ(a.median, b.median) << what;
  ASSERT_EQ(a.at.size(), b.at.size()) << what;
  for (std::size_t k = 0; k < a.at.size(); ++k)
    EXPECT_EQ(a.at[k], b.at[k]) << what << ": " << percentile_levels()[k].name;
}

TEST(Percentiles, RuleByHand) {
  // Sorted 0, 10, 20, 30, 40 (n = 5): p = f·4.
  const std::vector<double> v = {30, 0, 40, 10, 20};
  const Distribution d = distribution_of(v);
  EXPECT_EQ(d.count, 5);
  EXPECT_EQ(d.min, 0);
  EXPECT_EQ(d.max, 40);
  EXPECT_EQ(d.median, 20);                                      // the middle value
  EXPECT_NEAR(d.at[level("p99.9")], 0.004 * 30 + 0.996 * 40, 1e-12);
  EXPECT_NEAR(d.at[level("p90")], 36, 1e-12);   // p = 3.6: 0.4·30 + 0.6·40
  EXPECT_NEAR(d.at[level("p75")], 30, 1e-12);   // p = 3
  EXPECT_NEAR(d.at[level("p10")], 4, 1e-12);    // p = 0.4: 0.6·0 + 0.4·10
  EXPECT_NEAR(d.at[level("p0.1")], 0.04, 1e-12);  // p = 0.004
  // Even n: the median is the mean of the two middle values, as llama.cpp computes it.
  EXPECT_EQ(distribution_of({4, 1, 3, 2}).median, 2.5);
  // One value: every percentile is it.
  const Distribution one = distribution_of({0.25});
  for (double x : one.at) EXPECT_EQ(x, 0.25);
  EXPECT_EQ(distribution_of({}).count, 0);
}

TEST(Percentiles, RefusesNonFiniteValues) {
  EXPECT_ANY_THROW(distribution_of({1.0, NAN}));
  const std::vector<double> v = {1.0, INFINITY};
  EXPECT_ANY_THROW(streamed_distribution(chunked(v, 1)));
}

TEST(Percentiles, MatchLlamaCppTranscription) {
  const auto fixture = nlohmann::json::parse(read_file(test::repo_path("tests/oracle/percentiles_fixture.json")));
  ASSERT_FALSE(fixture.at("cases").empty());
  for (const auto& c : fixture.at("cases")) {
    const std::vector<double> values = c.at("values").get<std::vector<double>>();
    const std::string what = "n = " + std::to_string(values.size());
    const Distribution d = distribution_of(values);
    // float64: the same rule in the same precision, to the bit.
    const Distribution f64 = Distribution::from_json(c.at("float64"), what);
    expect_same_bits(d, f64, what + " (float64)");
    // llama.cpp's float32: within float32 rounding of the values (their scale) and of the position
    // p = f·(n − 1), which moves the interpolation by up to a few float32 ulps of p times the gap
    // between the two values it lies between.
    const Distribution f32 = Distribution::from_json(c.at("float32"), what);
    const double scale = std::max(std::fabs(d.min), std::fabs(d.max));
    std::vector<double> sorted = values;
    std::sort(sorted.begin(), sorted.end());
    const double n1 = static_cast<double>(sorted.size() - 1);
    for (std::size_t k = 0; k < d.at.size(); ++k) {
      const auto i = static_cast<std::size_t>(percentile_levels()[k].fraction * n1);
      const double gap = sorted[std::min(i + 1, sorted.size() - 1)] - sorted[i];
      EXPECT_NEAR(d.at[k], f32.at[k], 4e-7 * scale + 2 * FLT_EPSILON * n1 * gap) << what << ": " << percentile_levels()[k].name;
    }
    expect_same_bits(streamed_distribution(chunked(values, 7)), d, what + " (streamed)");
  }
}

TEST(Percentiles, StreamedEqualsInMemory) {
  std::mt19937_64 rng(80);
  std::lognormal_distribution<double> heavy(-3.0, 2.5);
  std::uniform_real_distribution<double> signed_unit(-1.0, 1.0);
  for (std::size_t n : {1u, 2u, 3u, 999u, 1000u, 200001u}) {
    std::vector<double> kl(n), dp(n);
    for (std::size_t i = 0; i < n; ++i) {
      kl[i] = heavy(rng);
      dp[i] = i % 5 == 0 ? 0.0 : (i % 7 == 0 ? -0.0 : signed_unit(rng));  // ties at ±0
    }
    for (const auto* v : {&kl, &dp}) {
      const std::string what = "n = " + std::to_string(n);
      expect_same_bits(streamed_distribution(chunked(*v, 4096)), distribution_of(*v), what);
      std::vector<double> sorted = *v;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_EQ(distribution_of(*v).at[level("p99")], sorted_percentile(sorted, 0.99)) << what;
      EXPECT_EQ(distribution_of(*v).median, sorted_median(sorted)) << what;
    }
  }
}

TEST(Percentiles, JsonRoundTrip) {
  const Distribution d = distribution_of({3, 1, 2, 5, 8});
  const nlohmann::json j = d.to_json();
  EXPECT_EQ(j.at("p99").get<double>(), d.at[level("p99")]);
  expect_same_bits(Distribution::from_json(j, "test"), d, "round trip");
  EXPECT_ANY_THROW(Distribution::from_json(nlohmann::json{{"count", 1}}, "test"));
}

}  // namespace
}  // namespace qeval
