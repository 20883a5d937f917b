// qeval check on hand-made records: limits (abs, rel, either), directions, NaN, missing schemes
// and statistics, protocol mismatch, and every malformed tolerance file.
#include "reports/check.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "records/record.h"
#include "tests/support/hand_records.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using test::hand_protocol;
using test::hand_record;
using test::hand_statistics;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

nlohmann::json baseline() {
  return hand_record("runs/base", "softmax", "adam",
                     {{"full", 10.0, 0.0, hand_statistics(4.0, 3.0, 20.0, 5.0, 10.0, 20.0)},
                      {"int8-coarse", 12.0, 2.0},
                      {"int8-fine", 10.1, 0.1}});
}

Tolerances tolerances(const std::string& text) { return Tolerances::from_json(nlohmann::json::parse(text), "t.json"); }

const CheckItem* item(const CheckReport& r, const std::string& scheme, const std::string& quantity) {
  for (const auto& i : r.items)
    if (i.scheme == scheme && i.quantity == quantity) return &i;
  return nullptr;
}

TEST(Check, IdenticalRecordPasses) {
  auto t = tolerances(R"({"schemes": {"*": {"dppl_abs": 0.1}, "full": {"ppl_abs": 0.1}},
                          "statistics": {"kurtosis_rest": {"abs": 0.5}, "first_attn_pct": {"abs": 1}}})");
  CheckReport r = check_record(baseline(), baseline(), t);
  EXPECT_TRUE(r.passed());
  // full: PPL (its named entry replaces "*"), two schemes' ΔPPL, two statistics.
  EXPECT_EQ(r.items.size(), 5u);
  EXPECT_TRUE(contains(format_check_markdown(r), "PASS: 5 quantities within tolerance"));
}

TEST(Check, DpplIncreaseBeyondTheAbsoluteLimitIsAViolationWithItsNumbers) {
  auto t = tolerances(R"({"schemes": {"*": {"dppl_abs": 0.5}}})");
  nlohmann::json now = baseline();
  now["schemes"][1]["vs_full"]["dppl"] = 2.75;  // coarse: +0.75 > 0.5
  now["schemes"][2]["vs_full"]["dppl"] = 0.5;   // fine: +0.4, within
  CheckReport r = check_record(baseline(), test::sealed(now), t, {false, "B.json", "R.json"});
  ASSERT_EQ(r.violations(), 1u);
  const CheckItem* coarse = item(r, "int8-coarse", "ΔPPL");
  ASSERT_NE(coarse, nullptr);
  EXPECT_TRUE(coarse->violated);
  EXPECT_DOUBLE_EQ(coarse->change, 0.75);
  EXPECT_DOUBLE_EQ(coarse->allowed, 0.5);
  EXPECT_FALSE(item(r, "int8-fine", "ΔPPL")->violated);
  std::string md = format_check_markdown(r);
  EXPECT_TRUE(contains(md, "FAIL: 1 of 3 quantities outside tolerance")) << md;
  EXPECT_TRUE(contains(md, "- int8-coarse ΔPPL: baseline 2, new 2.75, worse by 0.75, allowed 0.5 (abs 0.5)")) << md;
  EXPECT_TRUE(contains(md, "R.json against baseline B.json")) << md;
}

TEST(Check, ImprovementsNeverViolateAnIncreaseLimit) {
  auto t = tolerances(R"({"schemes": {"*": {"dppl_abs": 0.0, "ppl_abs": 0.0}}})");
  nlohmann::json now = baseline();
  now["schemes"][1]["vs_full"]["dppl"] = 0.5;
  now["schemes"][0]["perplexity"]["ppl"] = 9.0;
  EXPECT_TRUE(check_record(baseline(), test::sealed(now), t).passed());
}

TEST(Check, EitherLimitSufficesWhenBothAreGiven) {
  // Baseline coarse ΔPPL 2.0; rel 0.5 allows +1.0, abs 0.25 allows +0.25: the larger wins.
  auto t = tolerances(R"({"schemes": {"int8-coarse": {"dppl_abs": 0.25, "dppl_rel": 0.5}}})");
  nlohmann::json now = baseline();
  now["schemes"][1]["vs_full"]["dppl"] = 2.9;
  CheckReport r = check_record(baseline(), test::sealed(now), t);
  EXPECT_TRUE(r.passed());
  EXPECT_DOUBLE_EQ(item(r, "int8-coarse", "ΔPPL")->allowed, 1.0);
  now["schemes"][1]["vs_full"]["dppl"] = 3.1;
  EXPECT_FALSE(check_record(baseline(), test::sealed(now), t).passed());
  // Relative alone scales with the baseline.
  auto rel = tolerances(R"({"schemes": {"int8-fine": {"dppl_rel": 1.0}}})");
  now = baseline();
  now["schemes"][2]["vs_full"]["dppl"] = 0.25;  // +0.15 > 1.0 × 0.1
  r = check_record(baseline(), test::sealed(now), rel);
  ASSERT_EQ(r.violations(), 1u);
  EXPECT_DOUBLE_EQ(item(r, "int8-fine", "ΔPPL")->allowed, 0.1);
}

TEST(Check, NamedSchemeOverridesTheDefaultAndUnnamedSchemesWithoutDefaultAreNoted) {
  auto t = tolerances(R"({"schemes": {"int8-coarse": {"dppl_abs": 5}}})");
  nlohmann::json now = baseline();
  now["schemes"][1]["vs_full"]["dppl"] = 6.0;   // +4, within 5
  now["schemes"][2]["vs_full"]["dppl"] = 50.0;  // fine has no tolerance: not checked
  CheckReport r = check_record(baseline(), test::sealed(now), t);
  EXPECT_TRUE(r.passed());
  EXPECT_EQ(r.items.size(), 1u);
  EXPECT_TRUE(contains(format_check_markdown(r), "scheme int8-fine: no tolerance given, not checked"));
}

TEST(Check, StatisticDirections) {
  nlohmann::json now = baseline();
  now["schemes"][0]["statistics"] = hand_statistics(4.0, 2.0, 20.0, 5.0, 10.0, 20.0);  // kurtosis rest 3 → 2
  auto both = tolerances(R"({"statistics": {"kurtosis_rest": {"abs": 0.5}}})");
  CheckReport r = check_record(baseline(), test::sealed(now), both);
  ASSERT_EQ(r.violations(), 1u);
  EXPECT_DOUBLE_EQ(item(r, "full", "kurtosis_rest")->change, 1.0);
  auto increase = tolerances(R"({"statistics": {"kurtosis_rest": {"abs": 0.5, "direction": "increase"}}})");
  EXPECT_TRUE(check_record(baseline(), test::sealed(now), increase).passed());
  auto decrease = tolerances(R"({"statistics": {"kurtosis_rest": {"abs": 0.5, "direction": "decrease"}}})");
  EXPECT_FALSE(check_record(baseline(), test::sealed(now), decrease).passed());
}

TEST(Check, EveryStatisticIsReadFromItsPlace) {
  // Each statistic moved by a different amount, inside its domain (ratios and shares stay in
  // [0, 1]); a limit just below it must flag it and only it.
  nlohmann::json base = baseline();
  nlohmann::json now = baseline();
  auto& s = now["schemes"][0]["statistics"];
  s["hidden"]["kurtosis"]["first"] = 5.0;        // +1
  s["hidden"]["kurtosis"]["rest"] = 5.0;         // +2
  s["hidden"]["max_abs"]["first"] = 23.0;        // +3
  s["hidden"]["max_abs"]["rest"] = 9.0;          // +4
  s["hidden"]["inf_over_l2"]["first"] = 0.55;    // +0.05
  s["hidden"]["inf_over_l2"]["rest"] = 0.31;     // +0.06
  s["attention"]["first_attn_pct"] = 17.0;       // +7
  s["attention"]["first_token_share"] = 0.13;    // +0.08
  s["attention"]["sink_rate_pct"] = 29.0;        // +9
  s["attention"]["entropy"] = 1.75;              // +0.5 (an entropy lies in [0, log 256])
  const std::vector<double> moved = {1, 2, 3, 4, 0.05, 0.06, 7, 0.08, 9, 0.5};
  const std::vector<std::string> names = {"kurtosis_first",    "kurtosis_rest",    "max_abs_first",  "max_abs_rest",
                                          "inf_over_l2_first", "inf_over_l2_rest", "first_attn_pct", "first_token_share",
                                          "sink_rate_pct",     "attention_entropy"};
  ASSERT_EQ(names.size(), statistic_names().size());
  for (std::size_t k = 0; k < names.size(); ++k) {
    nlohmann::json t = {{"statistics", nlohmann::json::object()}};
    for (std::size_t other = 0; other < names.size(); ++other)
      t["statistics"][names[other]] = {{"abs", other == k ? moved[k] / 2 : 100.0}};
    CheckReport r = check_record(test::sealed(base), test::sealed(now), Tolerances::from_json(t, "t"));
    ASSERT_EQ(r.violations(), 1u) << names[k];
    const CheckItem* i = item(r, "full", names[k]);
    ASSERT_NE(i, nullptr) << names[k];
    EXPECT_TRUE(i->violated) << names[k];
    EXPECT_NEAR(i->change, moved[k], 1e-9) << names[k];
  }
}

TEST(Check, StatisticThatBecameNanIsAViolationAndANullBaselineIsNoted) {
  auto t = tolerances(R"({"statistics": {"kurtosis_first": {"abs": 1}, "kurtosis_rest": {"abs": 1}}})");
  nlohmann::json base = baseline(), now = baseline();
  now["schemes"][0]["statistics"]["hidden"]["kurtosis"]["first"] = nullptr;
  base["schemes"][0]["statistics"]["hidden"]["kurtosis"]["rest"] = nullptr;
  CheckReport r = check_record(test::sealed(base), test::sealed(now), t);
  ASSERT_EQ(r.violations(), 1u);
  EXPECT_TRUE(item(r, "full", "kurtosis_first")->violated);
  EXPECT_EQ(item(r, "full", "kurtosis_rest"), nullptr);
  std::string md = format_check_markdown(r);
  EXPECT_TRUE(contains(md, "not a number")) << md;
  EXPECT_TRUE(contains(md, "full kurtosis_rest: null in the baseline, not checked")) << md;
}

TEST(Check, MultipleViolationsAreAllNamed) {
  auto t = tolerances(R"({"schemes": {"*": {"dppl_abs": 0.1}}, "statistics": {"max_abs_first": {"rel": 0.1}}})");
  nlohmann::json now = baseline();
  now["schemes"][1]["vs_full"]["dppl"] = 3.0;
  now["schemes"][2]["vs_full"]["dppl"] = 0.3;
  now["schemes"][0]["statistics"]["hidden"]["max_abs"]["first"] = 40.0;
  CheckReport r = check_record(baseline(), test::sealed(now), t);
  EXPECT_EQ(r.violations(), 3u);
  std::string md = format_check_markdown(r);
  EXPECT_TRUE(contains(md, "- int8-coarse ΔPPL:")) << md;
  EXPECT_TRUE(contains(md, "- int8-fine ΔPPL:")) << md;
  EXPECT_TRUE(contains(md, "- full max_abs_first: baseline 20, new 40, worse by 20, allowed 2")) << md;
  nlohmann::json j = check_report_to_json(r);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["violations"], 3);
}

TEST(Check, MissingSchemeIsAnErrorUnlessSkipped) {
  nlohmann::json now = baseline();
  now["schemes"].erase(1);  // no int8-coarse
  auto t = tolerances(R"({"schemes": {"*": {"dppl_abs": 0.1}}})");
  try {
    check_record(baseline(), test::sealed(now), t, {false, "B.json", "R.json"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "R.json has no scheme 'int8-coarse'")) << e.what();
  }
  auto skip = tolerances(R"({"missing_scheme": "skip", "schemes": {"*": {"dppl_abs": 0.1}}})");
  CheckReport r = check_record(baseline(), test::sealed(now), skip);
  EXPECT_TRUE(r.passed());
  EXPECT_TRUE(contains(format_check_markdown(r), "scheme int8-coarse is missing"));
  auto optional = tolerances(R"({"schemes": {"*": {"dppl_abs": 0.1}, "int8-coarse": {"required": false}}})");
  EXPECT_TRUE(check_record(baseline(), test::sealed(now), optional).passed());
  auto required = tolerances(R"({"missing_scheme": "skip", "schemes": {"full": {"ppl_abs": 1}, "int8-coarse": {"required": true}}})");
  EXPECT_THROW(check_record(baseline(), test::sealed(now), required), Error);
}

TEST(Check, ToleranceForASchemeTheBaselineLacksIsAnError) {
  auto t = tolerances(R"({"schemes": {"w4-zeropoint": {"dppl_abs": 0.1}}})");
  EXPECT_THROW(check_record(baseline(), baseline(), t), Error);
}

TEST(Check, ProtocolDataOrPrecisionMismatchIsAnErrorUnlessAllowed) {
  auto t = tolerances(R"({"schemes": {"*": {"dppl_abs": 0.1}}})");
  nlohmann::json now = baseline();
  now["protocol"] = hand_protocol(128);
  try {
    check_record(baseline(), test::sealed(now), t, {false, "B.json", "R.json"});
    FAIL() << "expected a protocol mismatch";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "protocol.seq_len: 256 vs 128")) << e.what();
    EXPECT_TRUE(contains(e.what(), "--allow-protocol-mismatch")) << e.what();
  }
  CheckReport r = check_record(baseline(), test::sealed(now), t, {true, "B.json", "R.json"});
  EXPECT_TRUE(r.passed());
  EXPECT_TRUE(contains(format_check_markdown(r), "differ (allowed)"));
  now = baseline();
  now["data"]["hash"] = "other";
  EXPECT_THROW(check_record(baseline(), test::sealed(now), t), Error);
  now = baseline();
  now["precision"]["dtype"] = "fp16";
  EXPECT_THROW(check_record(baseline(), test::sealed(now), t), Error);
  // The model is what CI changes: another checkpoint and tokenizer counts are fine.
  now = baseline();
  now["model"]["path"] = "runs/next";
  now["protocol"]["token_stream_hash"] = "other";
  EXPECT_NO_THROW(check_record(baseline(), test::sealed(now), t));
}

TEST(Check, MissingStatisticsAreErrors) {
  auto t = tolerances(R"({"statistics": {"first_attn_pct": {"abs": 1}}})");
  nlohmann::json now = baseline();
  now["schemes"][0]["statistics"] = nullptr;
  EXPECT_THROW(check_record(baseline(), test::sealed(now), t), Error);  // new record lacks statistics
  nlohmann::json base = baseline();
  base["schemes"][0]["statistics"] = nullptr;
  EXPECT_THROW(check_record(test::sealed(base), baseline(), t), Error);  // baseline has none at all
  now = baseline();
  now["schemes"][0]["statistics"].erase("attention");
  EXPECT_THROW(check_record(baseline(), test::sealed(now), t), Error);  // new record ran --no-attention-stats
  base = baseline();
  base["schemes"][0]["statistics"].erase("attention");
  EXPECT_THROW(check_record(test::sealed(base), baseline(), t), Error);  // baseline did
  auto for_coarse = tolerances(R"({"statistics_for": ["int8-coarse"], "statistics": {"kurtosis_rest": {"abs": 1}}})");
  EXPECT_THROW(check_record(baseline(), baseline(), for_coarse), Error);  // baseline has no coarse statistics
}

TEST(Check, MalformedRecordIsAnError) {
  auto t = tolerances(R"({"schemes": {"*": {"dppl_abs": 0.1}}})");
  nlohmann::json now = baseline();
  now["schemes"][1].erase("vs_full");
  EXPECT_THROW(check_record(baseline(), now, t), Error);
  now = baseline();
  now.erase("protocol");
  EXPECT_THROW(check_record(baseline(), now, t), Error);
}

TEST(Check, BadToleranceFilesAreRefusedNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"([1, 2])", "expected a JSON object"},
      {R"({"scheme": {}})", "unknown key \"scheme\""},
      {R"({"missing_scheme": "maybe"})", "missing_scheme"},
      {R"({"schemes": []})", "\"schemes\" should be an object"},
      {R"({"schemes": {"full": {"dppl": 1}}})", "unknown key \"dppl\""},
      {R"({"schemes": {"full": {"dppl_abs": -1}}})", "\"dppl_abs\" should be a finite number >= 0"},
      {R"({"schemes": {"full": {"dppl_abs": "0.1"}}})", "\"dppl_abs\" should be a number"},
      {R"({"schemes": {"full": {"required": "yes"}}})", "\"required\" should be true or false"},
      {R"({"statistics_for": "full"})", "statistics_for"},
      {R"({"statistics": {"kurtosis": {"abs": 1}}})", "unknown key \"kurtosis\""},
      {R"({"statistics": {"kurtosis_rest": {}}})", "give \"abs\" and/or \"rel\""},
      {R"({"statistics": {"kurtosis_rest": {"abs": 1, "direction": "up"}}})", "direction"},
  };
  for (const auto& [text, message] : bad) {
    try {
      tolerances(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), message)) << text << " → " << e.what();
      EXPECT_TRUE(contains(e.what(), "t.json")) << e.what();
    }
  }
}

TEST(Check, ToleranceFileOnDisk) {
  test::TempDir dir;
  test::write_bytes(dir / "bad.json", "{ not json");
  EXPECT_THROW(load_tolerances(dir / "bad.json"), Error);
  EXPECT_THROW(load_tolerances(dir / "absent.json"), Error);
  test::write_bytes(dir / "t.json", R"({"description": "ok", "schemes": {"*": {"dppl_abs": 0.1}}})");
  Tolerances t = load_tolerances(dir / "t.json");
  ASSERT_EQ(t.schemes.count("*"), 1u);
  EXPECT_EQ(*t.schemes["*"].dppl.abs, 0.1);
  EXPECT_FALSE(t.schemes["*"].dppl.rel.has_value());
}

}  // namespace
}  // namespace qeval
