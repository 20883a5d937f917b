// Beyond the mean (issue 80) in what users read: compare's llama.cpp-style block and position
// table, check's limits on the per-token KL's percentiles, plot's KL CDF and position pictures.
// Hand records (tests/support/hand_records.h add_tails) carry the sections as qeval writes them.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/files.h"
#include "reports/check.h"
#include "reports/compare.h"
#include "reports/plot.h"
#include "records/record_verify.h"
#include "tests/support/hand_records.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// 20 windows × 255 scored tokens; scheme int8-coarse's KL values rise linearly to `top`.
nlohmann::json record_with_tails(double top) {
  nlohmann::json r = test::hand_record("runs/base", "softmax", "adam", {{"full", 10.0, 0.0}, {"int8-coarse", 12.0, 2.0}});
  std::vector<double> kl(20 * 255);
  for (std::size_t i = 0; i < kl.size(); ++i) kl[i] = top * static_cast<double>(i) / static_cast<double>(kl.size() - 1);
  test::add_tails(r, 1, kl);
  return r;
}

TEST(TokenTails, CompareShowsTheLlamaCppBlockAndThePositionTable) {
  const std::vector<LabeledRecord> records = {{"base.json", record_with_tails(1.0), "base", {}}};
  const std::string md = format_comparison(records, CompareFormat::markdown);
  for (const char* line : {"====== KL divergence statistics ======", "Mean    KLD:", "Maximum KLD:   1.000000",
                           "99.0%   KLD:   0.990000", "Median  KLD:   0.500000", "Minimum KLD:   0.000000",
                           "Reverse KLD:", "====== Token probability statistics ======", "RMS Δp    :",
                           "Same top p:", "Top-1 flips:", "5100 tokens"})
    EXPECT_TRUE(contains(md, line)) << line << "\n" << md;
  // llama.cpp prints 75 % and 25 % for Δp only.
  EXPECT_TRUE(contains(md, "75.0%   Δp:")) << md;
  EXPECT_FALSE(contains(md, "75.0%   KLD:")) << md;
  // Prediction positions 0–254 are scored in each of the 20 windows: buckets 0, 1, 2–3, …, 128–255.
  EXPECT_TRUE(contains(md, "| positions | tokens | int8-coarse ΔNLL ± se | int8-coarse KL |")) << md;
  EXPECT_TRUE(contains(md, "| 128–255 | 2540 |")) << md;
  EXPECT_TRUE(contains(md, "| 1 | 20 |")) << md;
  const auto json = nlohmann::json::parse(format_comparison(records, CompareFormat::json));
  ASSERT_EQ(json.at("per_token").size(), 1u);
  EXPECT_EQ(json["per_token"][0]["per_token"]["kl"]["percentiles"]["max"], 1.0);
  // A record written before the tails shows neither.
  const std::vector<LabeledRecord> old = {
      {"old.json", test::hand_record("runs/base", "softmax", "adam", {{"full", 10.0, 0.0}, {"int8-coarse", 12.0, 2.0}}), "old", {}}};
  EXPECT_FALSE(contains(format_comparison(old, CompareFormat::markdown), "KL divergence statistics"));
}

TEST(TokenTails, CheckLimitsAPercentileOfThePerTokenKl) {
  const auto t = Tolerances::from_json(nlohmann::json::parse(R"({"schemes": {"*": {"kl": {"p99": {"abs": 0.1}}}}})"), "t.json");
  CheckReport same = check_record(record_with_tails(1.0), record_with_tails(1.0), t);
  EXPECT_TRUE(same.passed()) << format_check_markdown(same);
  ASSERT_EQ(same.items.size(), 1u);  // full precision has none: noted
  EXPECT_EQ(same.items[0].quantity, "KL p99");
  CheckReport worse = check_record(record_with_tails(1.0), record_with_tails(1.2), t);  // p99 0.99 → 1.188
  ASSERT_EQ(worse.violations(), 1u) << format_check_markdown(worse);
  EXPECT_NEAR(worse.items[0].change, 0.198, 1e-9);
  // A baseline without percentiles cannot be gated on them: unusable input, never a PASS.
  const nlohmann::json old = test::hand_record("runs/base", "softmax", "adam", {{"full", 10.0, 0.0}, {"int8-coarse", 12.0, 2.0}});
  EXPECT_THROW(check_record(old, record_with_tails(1.0), t), Error);
  // Unknown names are refused naming the key.
  EXPECT_THROW(Tolerances::from_json(nlohmann::json::parse(R"({"schemes": {"*": {"kl": {"p98": {"abs": 1}}}}})"), "t.json"),
               Error);
  EXPECT_THROW(Tolerances::from_json(nlohmann::json::parse(R"({"schemes": {"*": {"kl": {"p99": {}}}}})"), "t.json"), Error);
}

TEST(TokenTails, VerifyRefusesAnEditedTailOrAPercentileOutOfOrder) {
  nlohmann::json r = record_with_tails(1.0);
  EXPECT_NO_THROW(require_verified_record(r, "r.json", false));
  nlohmann::json edited = r;
  edited["schemes"][1]["per_token"]["kl"]["mean"] = 0.5;
  EXPECT_THROW(require_verified_record(edited, "r.json", false), Error);
  nlohmann::json disorder = r;
  disorder["schemes"][1]["per_token"]["kl"]["percentiles"]["p90"] = 2.0;  // above p95
  EXPECT_THROW(require_verified_record(disorder, "r.json", false), Error);
  nlohmann::json bucket = r;
  bucket["schemes"][1]["position_buckets"][0]["kl_mean"] = 7.0;
  EXPECT_THROW(require_verified_record(bucket, "r.json", false), Error);
}

TEST(TokenTails, PlotDrawsTheKlCdfAndThePositionBuckets) {
  try {
    find_gnuplot();
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  test::TempDir dir;
  const std::vector<nlohmann::json> records = {record_with_tails(1.0)};
  ASSERT_TRUE(has_token_tails(records));
  const auto pngs = plot_token_tails(records, dir.path());
  ASSERT_EQ(pngs.size(), 2u);
  for (const auto& p : pngs) EXPECT_GT(std::filesystem::file_size(p), 1000u) << p;
  const std::string dat = read_file(dir / "kl_cdf.dat");
  // min (0: no place on a log axis), the eleven levels, max: 13 points.
  EXPECT_TRUE(contains(dat, "NaN 0\n")) << dat;
  EXPECT_TRUE(contains(dat, "0.99 0.99\n")) << dat;
  EXPECT_TRUE(contains(dat, "1 1\n")) << dat;
  EXPECT_TRUE(contains(read_file(dir / "kl_cdf.gp"), "set logscale x"));
  EXPECT_TRUE(contains(read_file(dir / "position_buckets.dat"), "128 255 "));
  EXPECT_FALSE(has_token_tails({test::hand_record("m", "softmax", "adam", {{"full", 10.0, 0.0}, {"int8-coarse", 12.0, 2.0}})}));
}

}  // namespace
}  // namespace qeval
