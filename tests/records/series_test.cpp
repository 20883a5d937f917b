// Series of checkpoints (issue 44) without models: finding the checkpoints of each producer and
// when each is complete, the series record's entries, the trajectory table, and `check`'s rules
// on hand-made series (exit 0 / 1 / 2 at the command level: tests/cli/series_cli_test.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "common/error.h"
#include "common/files.h"
#include "reports/series_check.h"
#include "records/series_record.h"
#include "eval/series_source.h"
#include "reports/series_views.h"
#include "tests/support/hand_records.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void write_json(const fs::path& path, const nlohmann::json& j) {
  fs::create_directories(path.parent_path());
  test::write_bytes(path, j.dump());
}

// A qeval kept checkpoint as far as the listing reads it: config.json's metadata.
void kept(const fs::path& run, std::int64_t step, std::int64_t warmup = 10) {
  write_json(run / ("step-" + std::to_string(step)) / "config.json",
             {{"format", "qeval"},
              {"metadata", {{"step", step}, {"tokens_seen", step * 256}, {"lr", 1e-3}, {"val_loss", 3.5},
                            {"train_loss", 3.6}, {"training", {{"warmup", warmup}, {"steps", 32}}}}}});
}

void hf_checkpoint(const fs::path& run, std::int64_t step, std::int64_t max_steps, bool tokens) {
  nlohmann::json state = {{"global_step", step},
                          {"max_steps", max_steps},
                          {"log_history", {{{"step", step}, {"loss", 2.5}, {"learning_rate", 5e-4}},
                                           {{"step", step}, {"eval_loss", 2.75}}}}};
  if (tokens) state["num_input_tokens_seen"] = step * 1000;
  write_json(run / ("checkpoint-" + std::to_string(step)) / "trainer_state.json", state);
}

TEST(SeriesSource, QevalStepFoldersInStepOrderWithTheirMetadata) {
  test::TempDir dir;
  for (std::int64_t s : {8, 1, 16, 2}) kept(dir / "run", s);
  fs::create_directories(dir / "run" / ".step-32.partial-123");  // being written: not listed
  EXPECT_TRUE(is_series_path(dir / "run"));
  EXPECT_FALSE(is_series_path(dir / "run" / "step-1"));
  EXPECT_FALSE(is_series_path(dir / "missing"));
  SeriesListing l = list_series(dir / "run");
  EXPECT_EQ(l.format, SeriesFormat::qeval_steps);
  ASSERT_EQ(l.checkpoints.size(), 4u);
  EXPECT_EQ(l.checkpoints[0].step, 1);
  EXPECT_EQ(l.checkpoints[3].step, 16);
  EXPECT_EQ(l.checkpoints[3].name, "step-16");
  EXPECT_EQ(l.checkpoints[3].tokens, 16 * 256);
  EXPECT_EQ(l.checkpoints[3].training.at("val_loss"), 3.5);
  EXPECT_EQ(l.checkpoints[3].training.at("warmup"), 10);
  EXPECT_EQ(l.checkpoints[3].training.at("total_steps"), 32);
  EXPECT_FALSE(l.finished);
  write_json(dir / "run" / "checkpoints.json", {{"finished", true}, {"steps", {1, 2, 8, 16, 32}}});
  EXPECT_FALSE(list_series(dir / "run").finished) << "step 32 is listed but not there yet";
  kept(dir / "run", 32);
  EXPECT_TRUE(list_series(dir / "run").finished);

  // A folder whose metadata contradicts its name is refused.
  kept(dir / "bad", 4);
  fs::rename(dir / "bad" / "step-4", dir / "bad" / "step-5");
  EXPECT_THROW(list_series(dir / "bad"), Error);
}

TEST(SeriesSource, HfTrainerCheckpointsSettleBeforeTheyCount) {
  test::TempDir dir;
  hf_checkpoint(dir / "hf", 500, 1000, true);
  hf_checkpoint(dir / "hf", 1000, 1000, false);
  fs::create_directories(dir / "hf" / "checkpoint-1500");  // no trainer_state.json yet
  SeriesListing watching = list_series(dir / "hf", /*settle_seconds=*/3600);
  EXPECT_TRUE(watching.checkpoints.empty()) << "every file was written just now";
  EXPECT_EQ(watching.pending.size(), 3u);
  fs::remove_all(dir / "hf" / "checkpoint-1500");
  SeriesListing l = list_series(dir / "hf");
  EXPECT_EQ(l.format, SeriesFormat::hf_trainer);
  ASSERT_EQ(l.checkpoints.size(), 2u);
  EXPECT_EQ(l.checkpoints[0].tokens, 500000);
  EXPECT_FALSE(l.checkpoints[1].tokens.has_value()) << "num_input_tokens_seen absent: unknown, not 0";
  EXPECT_EQ(l.checkpoints[0].training.at("lr"), 5e-4);
  EXPECT_EQ(l.checkpoints[0].training.at("val_loss"), 2.75);
  EXPECT_EQ(l.checkpoints[0].training.at("total_steps"), 1000);
  EXPECT_TRUE(l.finished) << "checkpoint-1000 reached max_steps";
  // Without --watch a checkpoint without its trainer_state.json is an error, not skipped.
  fs::create_directories(dir / "hf" / "checkpoint-1500");
  EXPECT_THROW(list_series(dir / "hf"), Error);
  // The two producers' folders side by side are ambiguous.
  kept(dir / "hf", 3);
  EXPECT_THROW(list_series(dir / "hf"), Error);
}

TEST(SeriesSource, ListFileLinesWithStepsFromWordsMetadataOrNames) {
  test::TempDir dir;
  kept(dir / "a", 40);
  fs::create_directories(dir / "ckpt" / "iter_0070");
  fs::create_directories(dir / "ckpt" / "other");
  test::write_bytes(dir / "series.txt",
                    "# a comment\n"
                    "a/step-40\n"                     // step and tokens from its metadata
                    "ckpt/iter_0070   # trailing comment\n"  // from its name
                    "ckpt/other 90 123456\n");        // from the line
  EXPECT_TRUE(is_series_path(dir / "series.txt"));
  SeriesListing l = list_series(dir / "series.txt");
  EXPECT_EQ(l.format, SeriesFormat::list_file);
  ASSERT_EQ(l.checkpoints.size(), 3u);
  EXPECT_EQ(l.checkpoints[0].step, 40);
  EXPECT_EQ(l.checkpoints[0].tokens, 40 * 256);
  EXPECT_EQ(l.checkpoints[1].step, 70);
  EXPECT_FALSE(l.checkpoints[1].tokens.has_value());
  EXPECT_EQ(l.checkpoints[2].step, 90);
  EXPECT_EQ(l.checkpoints[2].tokens, 123456);
  EXPECT_EQ(l.checkpoints[2].path, dir / "ckpt" / "other");

  // A last line without its newline is still being written when watching, complete otherwise.
  test::write_bytes(dir / "growing.txt", "a/step-40\nckpt/other 90");
  EXPECT_EQ(list_series(dir / "growing.txt", 1).checkpoints.size(), 1u);
  EXPECT_EQ(list_series(dir / "growing.txt").checkpoints.size(), 2u);

  for (const std::string bad : {"missing/folder 5\n", "ckpt/other five\n", "ckpt/other 5 6 7\n", "a/step-40 41\n",
                                "ckpt/other 5\nckpt/iter_0070 5\n"}) {
    SCOPED_TRACE(bad);
    test::write_bytes(dir / "bad.txt", bad);
    EXPECT_THROW(list_series(dir / "bad.txt"), Error);
  }
}

// What evaluation_identity reads beyond hand_record's fields.
nlohmann::json complete(nlohmann::json record, const std::string& weights_hash) {
  record["model"]["weights_hash"] = weights_hash;
  record["tokenizer"] = {{"kind", "sentencepiece"}, {"vocab_size", 512}};
  record["options"] = nlohmann::json::object();
  for (auto& s : record["schemes"]) s["description"] = s["name"];
  return record;
}

// A series record made the way `qeval eval` makes it, from hand-made records.
nlohmann::json hand_series(const std::string& name, const std::vector<std::pair<std::int64_t, double>>& coarse_dppl,
                           double sink = 10.0) {
  SeriesListing listing;
  std::vector<nlohmann::json> entries, evaluations;
  for (const auto& [step, dppl] : coarse_dppl) {
    SeriesCheckpoint c;
    c.name = "step-" + std::to_string(step);
    c.path = name + "/step-" + std::to_string(step);
    c.step = step;
    c.tokens = step * 100;
    c.training = {{"lr", 1e-3}, {"val_loss", 3.0}, {"train_loss", 3.1}, {"warmup", 20}};
    const nlohmann::json record = complete(
        test::hand_record(c.path.string(), "softmax", "adam",
                          {{"full", 10.0, 0.0, test::hand_statistics(4.0, 3.0, 20.0, 5.0, 10.0, sink)},
                           {"int8-coarse", 10.0 + dppl, dppl}}),
        "h" + std::to_string(step));
    entries.push_back(series_entry(c, record, name + "/step-" + std::to_string(step) + ".json"));
    evaluations.push_back(series_evaluation_identity(record));
  }
  return build_series_record(listing, name, nlohmann::json::object(), evaluations, entries);
}

TEST(SeriesRecord, EntriesCarryStepTokensPenaltiesAndStatistics) {
  const nlohmann::json s = hand_series("runA", {{10, 0.5}, {20, 0.25}, {40, 0.3}});
  EXPECT_TRUE(is_series_record(s));
  ASSERT_EQ(s.at("checkpoints").size(), 3u);
  const nlohmann::json& e = s.at("checkpoints").at(1);
  EXPECT_EQ(e.at("step"), 20);
  EXPECT_EQ(e.at("tokens"), 2000);
  EXPECT_EQ(e.at("schemes").at(1).at("name"), "int8-coarse");
  EXPECT_EQ(e.at("schemes").at(1).at("dppl"), 0.25);
  EXPECT_EQ(e.at("statistics").at("full").at("sink_rate_pct"), 10.0);
  EXPECT_EQ(e.at("statistics").at("full").at("kurtosis_rest"), 3.0);
  EXPECT_EQ(series_label(s), "runA");

  // A checkpoint evaluated on other windows cannot join the series.
  std::vector<nlohmann::json> entries = {s["checkpoints"][0], s["checkpoints"][1]};
  nlohmann::json other = complete(test::hand_record("x", "softmax", "adam", {{"full", 10.0, 0.0}}), "h");
  nlohmann::json same = other;
  other["protocol"]["token_stream_hash"] = "another";
  try {
    build_series_record({}, "runA", {}, {series_evaluation_identity(same), series_evaluation_identity(other)}, entries);
    ADD_FAILURE() << "accepted";
  } catch (const Error& err) {
    EXPECT_TRUE(contains(err.what(), "token_stream_hash")) << err.what();
  }
}

// A Mamba checkpoint (or a run with --no-attention-stats) has no attention statistics: its entry
// says null for them (issue 51: the walk through the missing "attention" crashed).
TEST(SeriesRecord, EntryOfARecordWithoutAttentionStatisticsHasNullAttentionColumns) {
  SeriesCheckpoint c;
  c.name = "step-5";
  c.path = "runM/step-5";
  c.step = 5;
  const nlohmann::json record = test::hand_record(
      "runM/step-5", "softmax", "adam", {{"full", 10.0, 0.0, test::hand_statistics(4.0, 3.0, 20.0, 5.0, std::nullopt)}});
  const nlohmann::json e = series_entry(c, record, "runM/step-5.json");
  const nlohmann::json& st = e.at("statistics").at("full");
  EXPECT_EQ(st.at("kurtosis_rest"), 3.0);
  for (const char* name : {"first_attn_pct", "first_token_share", "sink_rate_pct", "attention_entropy"})
    EXPECT_TRUE(st.at(name).is_null()) << name;
  nlohmann::json nulled = record;
  nulled["schemes"][0]["statistics"]["attention"] = nullptr;  // written as null rather than left out
  EXPECT_TRUE(series_entry(c, nulled, "runM/step-5.json").at("statistics").at("full").at("sink_rate_pct").is_null());
}

TEST(SeriesViews, TableHasARowPerCheckpointWithPenaltyAndSink) {
  std::vector<LabeledSeries> runs = {{"a.json", hand_series("runA", {{10, 0.5}, {20, 0.25}}), ""},
                                     {"b.json", hand_series("runB", {{10, 0.125}}, 0.0), ""}};
  prepare_series(runs);
  const std::string md = format_series(runs, CompareFormat::markdown);
  EXPECT_TRUE(contains(md, "Trajectory of runA (a.json, 2 checkpoints)")) << md;
  EXPECT_TRUE(contains(md, "| 20 | 2.0 k | 1.00e-03 | 3.0000 | 10.000 | +0.2500 |")) << md;
  EXPECT_TRUE(contains(md, "Sink₁^ε %")) << md;
  const std::string csv = format_series(runs, CompareFormat::csv);
  EXPECT_TRUE(contains(csv, "run,source,step,tokens,lr,val_loss,ppl,nll_mean,nll_se,dppl_int8-coarse")) << csv;
  EXPECT_TRUE(contains(csv, "runB,b.json,10,1000,")) << csv;
  const nlohmann::json j = nlohmann::json::parse(format_series(runs, CompareFormat::json));
  EXPECT_EQ(j.at("runs").at(1).at("rows").at(0).at("sink_rate_pct"), 0.0);

  runs[1].series["evaluation"]["protocol"]["seq_len"] = 999;
  EXPECT_THROW(prepare_series(runs), Error);
  EXPECT_NO_THROW(prepare_series(runs, /*allow_protocol_mismatch=*/true));
}

CheckReport rules(const nlohmann::json& series, const std::string& text, const nlohmann::json& baseline = nullptr) {
  return check_series_rules(series, baseline, nlohmann::json::parse(text), "rules.json", {false, "base.json", "run.json"});
}

TEST(SeriesCheck, PenaltyOfTheLastCheckpointAgainstTheFirstPastWarmup) {
  // Warm-up 20: step 10 is before it, step 20 the first past it.
  const nlohmann::json s = hand_series("runA", {{10, 5.0}, {20, 0.25}, {40, 0.3}});
  const std::string rule = R"({"rules": [{"quantity": "int8-coarse.dppl", "reference": "first_past_warmup", "max_ratio": )";
  CheckReport pass = rules(s, rule + "1.25}]}");
  ASSERT_EQ(pass.items.size(), 1u);
  EXPECT_TRUE(pass.passed());
  EXPECT_DOUBLE_EQ(pass.items[0].change, 0.3 / 0.25);
  EXPECT_EQ(pass.items[0].scheme, "step 40");
  CheckReport fail_ = rules(s, rule + "1.1}]}");
  EXPECT_EQ(fail_.violations(), 1u);
  EXPECT_TRUE(contains(format_check_markdown(fail_), "int8-coarse.dppl / step 20")) << format_check_markdown(fail_);
  // Against the first checkpoint (before warm-up) the same last value passes by far.
  EXPECT_TRUE(rules(s, R"({"rules": [{"quantity": "int8-coarse.dppl", "reference": "first", "max_ratio": 0.1}]})").passed());
}

TEST(SeriesCheck, EveryCheckpointAbsoluteLimitsAndNulls) {
  nlohmann::json s = hand_series("runA", {{10, 0.5}, {20, 0.25}}, 12.0);
  CheckReport r = rules(s, R"({"rules": [{"quantity": "full.sink_rate_pct", "at": "every", "max": 11},
                                          {"quantity": "int8-coarse.dppl", "at": 20, "min": 0.1}]})");
  EXPECT_EQ(r.items.size(), 3u);
  EXPECT_EQ(r.violations(), 2u);  // 12 % > 11 at both steps; 0.25 >= 0.1 passes
  s["checkpoints"][1]["statistics"]["full"]["sink_rate_pct"] = nullptr;  // NaN at the checked step
  CheckReport null_value = rules(s, R"({"rules": [{"quantity": "full.sink_rate_pct", "max": 100}]})");
  EXPECT_EQ(null_value.violations(), 1u);
}

TEST(SeriesCheck, AgainstABaselineRunAtEqualSteps) {
  const nlohmann::json base = hand_series("base", {{10, 0.5}, {20, 0.25}});
  const nlohmann::json run = hand_series("run", {{10, 0.5}, {20, 0.5}, {30, 0.5}});
  const std::string rule =
      R"({"rules": [{"quantity": "int8-coarse.dppl", "at": "every", "reference": "baseline", "max_increase": 0.1}]})";
  CheckReport r = rules(run, rule, base);
  EXPECT_EQ(r.items.size(), 2u);
  EXPECT_EQ(r.violations(), 1u);  // step 20: +0.25
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_TRUE(contains(r.notes[0], "no step 30")) << r.notes[0];
  EXPECT_THROW(rules(run, rule), Error) << "reference baseline without --baseline";
}

TEST(SeriesCheck, MalformedRulesAreUnusableInput) {
  const nlohmann::json s = hand_series("runA", {{10, 0.5}, {20, 0.25}});
  for (const char* bad : {
           R"({"rules": []})",
           R"({"rules": [{"quantity": "int8-coarse.dppl"}]})",                                       // no limit
           R"({"rules": [{"quantity": "int8-coarse.dpl", "max": 1}]})",                              // unknown name
           R"({"rules": [{"quantity": "coarse", "max": 1}]})",                                       // no scheme
           R"({"rules": [{"quantity": "int8-fine.dppl", "max": 1}]})",                               // scheme not evaluated
           R"({"rules": [{"quantity": "int8-coarse.dppl", "max_ratio": 1}]})",                       // ratio without reference
           R"({"rules": [{"quantity": "int8-coarse.dppl", "max": 1, "at": 15}]})",                   // no such step
           R"({"rules": [{"quantity": "int8-coarse.dppl", "max": 1, "tolerance": 2}]})",             // unknown key
           R"({"rules": [{"quantity": "int8-coarse.dppl", "reference": "first_past_warmup", "warmup": 99,
                          "max_ratio": 1}]})",                                                      // nothing past 99
           R"({"rules": [{"quantity": "int8-coarse.dppl", "max": 1}], "limits": 3})"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(rules(s, bad), Error);
  }
}

}  // namespace
}  // namespace qeval
