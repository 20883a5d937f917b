// Per-token values on disk (eval/token_values_file.h): the percentiles from files equal the ones in
// memory, streamed or not; the files are held to the rows; a resume keeps the state's windows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/error.h"
#include "eval/token_values_file.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

// Window w holds n_w values; its row sums them in order, as window_rows does.
struct Written {
  std::map<std::int64_t, WindowScores> rows;
  std::vector<double> kl, dp;
};

Written write_windows(const std::filesystem::path& file, const std::vector<std::int64_t>& windows, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> heavy(-4.0, 2.0);
  std::uniform_real_distribution<double> unit(-0.5, 0.5);
  Written out;
  TokenValuesWriter writer(file);
  for (std::int64_t w : windows) {
    const std::int64_t n = 5 + w % 4;
    std::vector<double> kl(static_cast<std::size_t>(n)), dp(static_cast<std::size_t>(n));
    WindowScores& r = out.rows[w];
    r.tokens = n;
    for (std::size_t i = 0; i < kl.size(); ++i) {
      kl[i] = heavy(rng);
      dp[i] = unit(rng);
      r.kl_sum += kl[i];
      r.dp_sum += dp[i];
    }
    writer.append(w, kl.data(), dp.data(), n);
    out.kl.insert(out.kl.end(), kl.begin(), kl.end());
    out.dp.insert(out.dp.end(), dp.begin(), dp.end());
  }
  writer.flush();
  return out;
}

void expect_same(const Distribution& a, const Distribution& b) {
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.min, b.min);
  EXPECT_EQ(a.max, b.max);
  EXPECT_EQ(a.at, b.at);
}

TEST(TokenValues, FilesGiveTheInMemoryPercentilesStreamedOrNot) {
  test::TempDir dir;
  const Written a = write_windows(dir / "a.values", {0, 2, 4, 6}, 1);
  const Written b = write_windows(dir / "b.values", {1, 3, 5}, 2);
  std::vector<double> kl = a.kl, dp = a.dp;
  kl.insert(kl.end(), b.kl.begin(), b.kl.end());
  dp.insert(dp.end(), b.dp.begin(), b.dp.end());
  const std::vector<std::filesystem::path> files = {dir / "a.values", dir / "b.values"};
  const TokenDistributions in_memory = token_distributions(files);
  const TokenDistributions streamed = token_distributions(files, /*in_memory_limit=*/0);
  expect_same(in_memory.kl, distribution_of(kl));
  expect_same(in_memory.dp, distribution_of(dp));
  expect_same(streamed.kl, in_memory.kl);
  expect_same(streamed.dp, in_memory.dp);
  // Held to the rows: both files together are windows 0..6.
  std::map<std::int64_t, WindowScores> rows = a.rows;
  rows.insert(b.rows.begin(), b.rows.end());
  EXPECT_NO_THROW(check_values_against_rows(files, rows, "s"));
  EXPECT_THROW(check_values_against_rows({files[0]}, rows, "s"), Error);  // windows missing
  rows[2].kl_sum += 1e-12;
  EXPECT_THROW(check_values_against_rows(files, rows, "s"), Error);  // not the bits its row sums
}

TEST(TokenValues, ResumeKeepsTheStatesWindowsOnceAndTruncationIsRefused) {
  test::TempDir dir;
  const auto file = dir / "s.values";
  const Written first = write_windows(file, {0, 1, 2, 3}, 3);
  write_windows(file, {2, 3}, 4);  // scored again after a kill, with other values
  retain_token_values(file, {0, 1, 2});
  std::vector<std::int64_t> seen;
  visit_token_values(file, [&](std::int64_t w, std::int64_t, const double*, const double*) { seen.push_back(w); });
  EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 1, 2}));
  std::map<std::int64_t, WindowScores> rows = first.rows;
  rows.erase(3);
  EXPECT_NO_THROW(check_values_against_rows({file}, rows, "s"));  // the first block of window 2 was kept
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 8);
  EXPECT_THROW(visit_token_values(file, [](std::int64_t, std::int64_t, const double*, const double*) {}), Error);
}

}  // namespace
}  // namespace qeval
