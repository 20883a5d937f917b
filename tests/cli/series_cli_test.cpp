// Issue 44 end to end: `qeval train --keep-checkpoints` writes a series, `qeval eval --model RUN`
// evaluates all of it in one command, resumes an interrupted series to the same bytes, follows a
// live trainer with --watch, and `compare`, `plot` and `check` read the series record (check's
// exit statuses 0 / 1 / 2 as for single records). One tiny run (d 32, 16 steps) serves them all.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "reports/plot.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using test::contains;

CommandResult qeval(const std::string& args) { return test::run_qeval(args); }

// Runs a shell script with $QEVAL set to the binary (for commands that must run side by side).
CommandResult shell(const std::string& script) {
  const char* bin = std::getenv("QEVAL_BINARY");
  if (!bin) {
    ADD_FAILURE() << "QEVAL_BINARY is not set (run through ctest)";
    return {-1, ""};
  }
  const fs::path file = fs::temp_directory_path() / ("qeval-series-" + std::to_string(::getpid()) + ".sh");
  test::write_bytes(file, "QEVAL='" + std::string(bin) + "'\n" + script + "\n");
  FILE* pipe = popen(("sh " + file.string() + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  fs::remove(file);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The first ~12 kB of TinyStories as training text.
fs::path small_text(const fs::path& dir) {
  const std::string text = read_file(test::data_path("text/tinystories/validation-head.txt"));
  const fs::path path = dir / "train.txt";
  test::write_bytes(path, text.substr(0, text.find("\n\n", 12000)));
  return path;
}

std::string train_args(const fs::path& data, const fs::path& out) {
  return "train -q --data " + data.string() + " --tokenizer " + test::kStoriesTokenizer +
         " --d-model 32 --n-layers 2 --n-heads 4 --seq-len 32 --batch-size 4 --steps 16 --warmup 4 --lr 3e-3"
         " --val-windows 8 --val-every 0 --threads 1 --keep-checkpoints 2 --out " + out.string();
}

// Every checkpoint on the same 3 windows of 32 tokens, full precision and int8-coarse.
std::string series_eval(const fs::path& model, const fs::path& out) {
  return test::kEval + " --model " + model.string() +
         " --seq-len 32 --max-windows 3 --schemes full,int8-coarse --threads 1 --out " + out.string();
}

class SeriesCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    CommandResult r = qeval(train_args(small_text(dir_->path()), run()));
    ASSERT_EQ(r.status, 0) << r.output;
    evaluation_ = new CommandResult(qeval(series_eval(run(), evaluated())));
  }
  static void TearDownTestSuite() {
    delete evaluation_;
    delete dir_;
  }
  static fs::path run() { return *dir_ / "run"; }
  static fs::path evaluated() { return *dir_ / "S.json"; }  // the run's series, for the views and check
  static test::TempDir* dir_;
  static CommandResult* evaluation_;  // of evaluated()
};
test::TempDir* SeriesCli::dir_ = nullptr;
CommandResult* SeriesCli::evaluation_ = nullptr;

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_file(p)); }

TEST_F(SeriesCli, EightCheckpointsInOneCommandOnTheSameWindows) {
  test::TempDir out;
  const CommandResult& r = *evaluation_;
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "Trajectory of run")) << r.output;
  EXPECT_TRUE(contains(r.output, "/run (qeval step-N): 8 checkpoints")) << r.output;
  const nlohmann::json s = read_json(evaluated());
  ASSERT_EQ(s.at("checkpoints").size(), 8u);
  std::string stream_hash;
  for (std::size_t i = 0; i < 8; ++i) {
    const nlohmann::json& e = s["checkpoints"][i];
    const std::int64_t step = 2 * static_cast<std::int64_t>(i + 1);
    EXPECT_EQ(e.at("step"), step);
    EXPECT_EQ(e.at("tokens"), step * 4 * 32);
    EXPECT_TRUE(e.at("training").at("val_loss").is_number());
    EXPECT_EQ(e.at("training").at("warmup"), 4);
    const nlohmann::json record = read_json(evaluated().parent_path() / e.at("record").get<std::string>());
    EXPECT_EQ(record.at("model").at("path"), (run() / ("step-" + std::to_string(step))).string());
    EXPECT_EQ(record.at("protocol").at("windows"), 3);
    if (i == 0) stream_hash = record.at("protocol").at("token_stream_hash");
    EXPECT_EQ(record.at("protocol").at("token_stream_hash"), stream_hash);
  }
  EXPECT_EQ(s.at("evaluation").at("windows").at("token_stream_hash"), stream_hash);
  // Training lowered the perplexity over the series.
  const auto ppl = [&](std::size_t i) { return s["checkpoints"][i]["schemes"][0]["ppl"].get<double>(); };
  EXPECT_LT(ppl(7), ppl(0));

  // The same options into the same --out: nothing to do, same bytes. Other options: refused.
  const std::string before = read_file(evaluated());
  CommandResult again = qeval(series_eval(run(), evaluated()));
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "already evaluated")) << again.output;
  EXPECT_EQ(read_file(evaluated()), before);
  CommandResult other = qeval(series_eval(run(), evaluated()) + " --max-windows 4");
  EXPECT_EQ(other.status, 2);
  EXPECT_TRUE(contains(other.output, "other options")) << other.output;
  EXPECT_TRUE(contains(other.output, "max-windows")) << other.output;
  // --series off evaluates the run folder's own (last) checkpoint.
  CommandResult single = qeval(series_eval(run(), out / "one.json") + " --series off");
  ASSERT_EQ(single.status, 0) << single.output;
  EXPECT_EQ(read_json(out / "one.json").at("model").at("weights_hash"), s["checkpoints"][7]["weights_hash"]);
}

TEST_F(SeriesCli, InterruptedSeriesResumesToTheSameBytes) {
  test::TempDir out;  // the straight run is evaluated(), in another folder under the same name
  fs::create_directories(out / "resumed");

  // 1. Stopped inside the first checkpoint (the testing stop saves its state, as a kill after a save would).
  CommandResult stopped = qeval(series_eval(run(), out / "resumed" / "S.json") + " --stop-after 2");
  EXPECT_EQ(stopped.status, 3) << stopped.output;
  EXPECT_TRUE(fs::exists(out / "resumed" / "S" / "step-2.json.state.json"));
  // 2. Between checkpoints: the run stopped after step 8 (the later ones hidden for the while).
  for (int step : {10, 12, 14, 16}) fs::rename(run() / ("step-" + std::to_string(step)), run() / (".hold-" + std::to_string(step)));
  CommandResult half = qeval(series_eval(run(), out / "resumed" / "S.json"));
  for (int step : {10, 12, 14, 16}) fs::rename(run() / (".hold-" + std::to_string(step)), run() / ("step-" + std::to_string(step)));
  ASSERT_EQ(half.status, 0) << half.output;
  EXPECT_TRUE(contains(half.output, "2 windows already done")) << half.output;
  EXPECT_EQ(read_json(out / "resumed" / "S.json").at("checkpoints").size(), 4u);
  // 3. Killed at whatever point one second finds it, then run to the end.
  shell("timeout -s KILL 1 $QEVAL " + series_eval(run(), out / "resumed" / "S.json") + " > /dev/null 2>&1");
  CommandResult rest = qeval(series_eval(run(), out / "resumed" / "S.json"));
  ASSERT_EQ(rest.status, 0) << rest.output;

  EXPECT_EQ(read_file(out / "resumed" / "S.json"), read_file(evaluated()));
  for (int step = 2; step <= 16; step += 2) {
    SCOPED_TRACE(step);
    const std::string name = "step-" + std::to_string(step) + ".json";
    nlohmann::json a = read_json(evaluated().parent_path() / "S" / name), b = read_json(out / "resumed" / "S" / name);
    for (auto* r : {&a, &b}) {  // what differs between any two runs of one evaluation
      for (const char* key : {"created", "timing", "timings", "command", "host", "plan"}) r->erase(key);  // plan: measured RSS
      for (auto& s : (*r)["schemes"]) s.erase("timing");
    }
    EXPECT_EQ(a, b);
    EXPECT_FALSE(fs::exists(out / "resumed" / "S" / (name + ".state.json")));
  }
}

// A series begun by an older qeval lacks the settings of options added since: it goes on when they
// are at their defaults (the older qeval behaved so) and is refused when one is not. The memory
// plan is never a setting: every plan gives the same bits.
TEST_F(SeriesCli, SeriesFromAnOlderQevalGoesOnWhenItsNewOptionsAreAtTheirDefaults) {
  test::TempDir out;
  fs::copy(evaluated().parent_path() / "S", out / "S", fs::copy_options::recursive);
  nlohmann::json older = read_json(evaluated());
  ASSERT_TRUE(older.at("settings").contains("quantize-ssm-inner")) << older.at("settings").dump();
  older["settings"].erase("quantize-ssm-inner");
  older["settings"]["plan"] = "streamed";  // a plan recorded as a setting by the qeval before the plan was left out
  test::write_bytes(out / "S.json", older.dump(1) + "\n");

  CommandResult other = qeval(series_eval(run(), out / "S.json") + " --quantize-ssm-inner");
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_TRUE(contains(other.output, "other options (quantize-ssm-inner")) << other.output;
  EXPECT_FALSE(contains(other.output, "plan")) << other.output;

  CommandResult same = qeval(series_eval(run(), out / "S.json") + " --plan resident");
  ASSERT_EQ(same.status, 0) << same.output;
  EXPECT_TRUE(contains(same.output, "already evaluated")) << same.output;
  EXPECT_EQ(read_json(out / "S.json").at("checkpoints"), read_json(evaluated()).at("checkpoints"));
}

TEST_F(SeriesCli, WatchFollowsALiveTrainerUntilItFinishes) {
  test::TempDir out;
  const fs::path live = out / "live";
  // The watcher starts first: its first look finds nothing, every checkpoint comes while it waits.
  CommandResult r = shell("$QEVAL " + series_eval(live, out / "W.json") +
                          " --watch --watch-poll 0.2 --watch-timeout 120 > " + (out / "watch.log").string() +
                          " 2>&1 &\nW=$!\nsleep 1\n$QEVAL " + train_args(small_text(out.path()), live) +
                          "\nwait $W\necho watch-exit=$?\ncat " + (out / "watch.log").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "watch-exit=0")) << r.output;
  EXPECT_TRUE(contains(r.output, "0 checkpoints, watching for more")) << r.output;
  EXPECT_TRUE(contains(r.output, "the trainer has finished; 8 checkpoints evaluated")) << r.output;
  const nlohmann::json s = read_json(out / "W.json");
  ASSERT_EQ(s.at("checkpoints").size(), 8u);
  // The same series evaluated after the fact: the same bytes, up to the source's path.
  ASSERT_EQ(qeval(series_eval(live, out / "after" / "W.json")).status, 2) << "folder of --out missing";
  fs::create_directories(out / "after");
  ASSERT_EQ(qeval(series_eval(live, out / "after" / "W.json")).status, 0);
  EXPECT_EQ(read_file(out / "after" / "W.json"), read_file(out / "W.json"));
}

TEST_F(SeriesCli, WatchStopsOnItsFlagFileOrTimeoutAndListFilesGrowByLines) {
  test::TempDir out;
  test::write_bytes(out / "list.txt", (run() / "step-2").string() + "\n" + (run() / "step-4").string());
  CommandResult timed = qeval(series_eval(out / "list.txt", out / "T.json") + " --watch --watch-poll 0.1 --watch-timeout 1");
  ASSERT_EQ(timed.status, 0) << timed.output;
  EXPECT_TRUE(contains(timed.output, "--watch-timeout")) << timed.output;
  EXPECT_EQ(read_json(out / "T.json").at("checkpoints").size(), 1u) << "the unfinished last line waits";
  test::write_bytes(out / "stop", "");
  test::write_bytes(out / "list.txt", (run() / "step-2").string() + "\n" + (run() / "step-4").string() + "\n");
  CommandResult flagged = qeval(series_eval(out / "list.txt", out / "T.json") + " --watch --watch-stop " +
                                (out / "stop").string());
  ASSERT_EQ(flagged.status, 0) << flagged.output;
  EXPECT_TRUE(contains(flagged.output, "exists, stopping; 2 checkpoints evaluated")) << flagged.output;
}

TEST_F(SeriesCli, HfTrainerCheckpointFolders) {
  test::TempDir out;
  for (int step : {100, 200}) {
    const fs::path ck = out / "hf" / ("checkpoint-" + std::to_string(step));
    fs::create_directories(ck);
    for (const char* f : {"config.json", "model.safetensors"})
      fs::copy_file(test::data_path("fixtures/tiny-gpt2-hf") / f, ck / f);
    test::write_bytes(ck / "trainer_state.json",
                      nlohmann::json{{"global_step", step},
                                     {"max_steps", 200},
                                     {"num_input_tokens_seen", step * 64},
                                     {"log_history", {{{"step", step}, {"learning_rate", 1e-4}, {"loss", 3.0}}}}}
                          .dump());
  }
  CommandResult r = qeval(series_eval(out / "hf", out / "H.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json s = read_json(out / "H.json");
  EXPECT_EQ(s.at("source").at("format"), "hf-trainer checkpoint-N");
  ASSERT_EQ(s.at("checkpoints").size(), 2u);
  EXPECT_EQ(s["checkpoints"][1].at("tokens"), 200 * 64);
  EXPECT_EQ(s["checkpoints"][1].at("training").at("lr"), 1e-4);
}

TEST_F(SeriesCli, CompareAndPlotShowTheTrajectory) {
  test::TempDir out;
  const std::string series = evaluated().string();
  CommandResult md = qeval("compare " + series + " " + series + " --labels adam,again");
  ASSERT_EQ(md.status, 0) << md.output;
  EXPECT_TRUE(contains(md.output, "Trajectory of adam")) << md.output;
  EXPECT_TRUE(contains(md.output, "Trajectory of again")) << md.output;
  EXPECT_TRUE(contains(md.output, "int8-coarse ΔNLL ± se")) << md.output;
  CommandResult csv = qeval("compare --format csv " + series);
  ASSERT_EQ(csv.status, 0) << csv.output;
  EXPECT_EQ(std::count(csv.output.begin(), csv.output.end(), '\n'), 9) << csv.output;  // header + 8 checkpoints
  CommandResult mixed = qeval("compare " + series + " " + (*dir_ / "S" / "step-2.json").string());
  EXPECT_EQ(mixed.status, 2) << mixed.output;

  try {
    find_gnuplot();
  } catch (const Error& e) {
    GTEST_SKIP() << "gnuplot not available: " << e.what();
  }
  CommandResult plot = qeval("plot " + series + " " + series + " --out " + (out / "fig").string());
  ASSERT_EQ(plot.status, 0) << plot.output;
  EXPECT_GT(fs::file_size(out / "fig" / "trajectory.png"), 1000u);
  EXPECT_TRUE(contains(read_file(out / "fig" / "trajectory.gp"), "set logscale x"));
  EXPECT_TRUE(contains(read_file(out / "fig" / "trajectory.dat"), "\n2048 ")) << "x: tokens seen, 16 steps of 128";
  // Against the fraction of the schedule: step 16 of 16 is at 1.
  CommandResult progress = qeval("plot " + series + " --x progress --out " + (out / "progress").string());
  ASSERT_EQ(progress.status, 0) << progress.output;
  EXPECT_TRUE(contains(read_file(out / "progress" / "trajectory.dat"), "\n1 ")) << read_file(out / "progress" / "trajectory.dat");
}

// Issue 51: a series is verified against its step records before compare, check or plot use it.
// A copy of the evaluated series, edited one way at a time, is refused with exit 2 naming the step.
TEST_F(SeriesCli, EditedSeriesIsRefusedByCompareCheckAndPlot) {
  test::TempDir out;
  fs::copy(evaluated().parent_path() / "S", out / "S", fs::copy_options::recursive);
  const nlohmann::json original = read_json(evaluated());
  const std::string rules = (out / "rules.json").string();
  test::write_bytes(rules, R"({"rules": [{"quantity": "full.ppl", "at": "every", "max": 1e9}]})");
  auto refused = [&](const std::string& what, nlohmann::json edited, const std::string& message) {
    SCOPED_TRACE(what);
    test::write_bytes(out / "S.json", edited.dump(1) + "\n");
    for (const std::string& command : {"compare " + (out / "S.json").string(),
                                       "check " + (out / "S.json").string() + " --tolerances " + rules,
                                       "plot " + (out / "S.json").string() + " --out " + (out / "fig").string()}) {
      const CommandResult r = qeval(command);
      EXPECT_EQ(r.status, 2) << command << "\n" << r.output;
      EXPECT_TRUE(contains(r.output, message)) << command << "\n" << r.output;
    }
  };
  // The copy as written passes.
  test::write_bytes(out / "S.json", original.dump(1) + "\n");
  const CommandResult ok = qeval("check " + (out / "S.json").string() + " --tolerances " + rules);
  EXPECT_EQ(ok.status, 0) << ok.output;

  nlohmann::json penalty = original;  // a better int8 penalty than the step's record has
  penalty["checkpoints"][3]["schemes"][1]["paired_dnll_mean"] = -0.5;
  refused("edited penalty", penalty, "step 8 does not hold what its record");
  nlohmann::json statistic = original;
  statistic["checkpoints"][0]["schemes"][0]["ppl"] = 1.0;
  refused("edited perplexity", statistic, "step 2 does not hold what its record");
  nlohmann::json reordered = original;
  std::swap(reordered["checkpoints"][2], reordered["checkpoints"][3]);
  refused("reordered steps", reordered, "step 6 follows step 8");
  nlohmann::json twice = original;
  twice["checkpoints"][3] = twice["checkpoints"][2];
  refused("a step twice", twice, "step 6 follows step 6");
  nlohmann::json other = original;  // step 6's entry pointing at step 8's record
  other["checkpoints"][2]["record"] = original["checkpoints"][3]["record"];
  refused("another step's record", other, "step 6 is " + original["checkpoints"][2]["model"].get<std::string>());
  nlohmann::json shared = original;  // step 8's entry pointing at step 6's record
  shared["checkpoints"][3]["record"] = original["checkpoints"][2]["record"];
  refused("one record for two steps", shared, "the record of an earlier step too");
  // A step record edited on its own: its summary no longer matches its per-window rows.
  test::write_bytes(out / "S.json", original.dump(1) + "\n");
  nlohmann::json step = read_json(out / "S" / "step-4.json");
  step["schemes"][1]["vs_full"]["paired_dnll_mean"] = -0.5;
  test::write_bytes(out / "S" / "step-4.json", step.dump(1) + "\n");
  const CommandResult forged = qeval("compare " + (out / "S.json").string());
  EXPECT_EQ(forged.status, 2) << forged.output;
  EXPECT_TRUE(contains(forged.output, "step-4.json")) << forged.output;
}

// Issue 51: a checkpoint replaced in place (here: step 4's weights overwritten by step 6's) is
// evaluated again, not served from the step record of the weights it had.
TEST_F(SeriesCli, StepRecordsOfReplacedWeightsAreNotReused) {
  test::TempDir out;
  fs::copy(run(), out / "run", fs::copy_options::recursive);
  const CommandResult first = qeval(series_eval(out / "run", out / "S.json"));
  ASSERT_EQ(first.status, 0) << first.output;
  for (const auto& file : fs::directory_iterator(out / "run" / "step-6"))
    if (file.is_regular_file() && file.path().filename() != "config.json")  // the weights; config.json names the step
      fs::copy_file(file.path(), out / "run" / "step-4" / file.path().filename(), fs::copy_options::overwrite_existing);
  const CommandResult again = qeval(series_eval(out / "run", out / "S.json"));
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "evaluating step 4 again")) << again.output;
  EXPECT_FALSE(contains(again.output, "evaluating step 6 again")) << again.output;
  const nlohmann::json s = read_json(out / "S.json");
  EXPECT_EQ(s["checkpoints"][1]["weights_hash"], s["checkpoints"][2]["weights_hash"]);  // steps 4 and 6: one model now
  EXPECT_EQ(s["checkpoints"][1]["schemes"], s["checkpoints"][2]["schemes"]);
}

// Issue 63: a step record is reused only for the very checkpoint and evaluation it measured. A
// config.json edited beside unchanged weights, a record edited after the fact, and series settings
// edited to match a command with other schemes each make the steps concerned evaluated again,
// with a note saying why; the series then holds what this run measures.
TEST_F(SeriesCli, StepRecordsAreReusedOnlyForTheSameCheckpointAndEvaluation) {
  test::TempDir out;
  fs::copy(run(), out / "run", fs::copy_options::recursive);
  const CommandResult first = qeval(series_eval(out / "run", out / "S.json"));
  ASSERT_EQ(first.status, 0) << first.output;
  const nlohmann::json original = read_json(out / "S.json");
  const CommandResult same = qeval(series_eval(out / "run", out / "S.json"));
  ASSERT_EQ(same.status, 0) << same.output;
  EXPECT_FALSE(contains(same.output, "is not reused")) << same.output;

  // 1. step 4's config.json: norm_eps 1e-5 -> 0.5, the weights untouched.
  nlohmann::json config = read_json(out / "run" / "step-4" / "config.json");
  config["norm_eps"] = 0.5;
  test::write_bytes(out / "run" / "step-4" / "config.json", config.dump(1));
  // 2. step 6's record: a better perplexity written into it.
  nlohmann::json step6 = read_json(out / "S" / "step-6.json");
  step6["schemes"][0]["perplexity"]["ppl"] = 1.5;
  test::write_bytes(out / "S" / "step-6.json", step6.dump(1) + "\n");
  const CommandResult again = qeval(series_eval(out / "run", out / "S.json"));
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "step-4.json is not reused: the checkpoint's config is not the one it measured"))
      << again.output;
  EXPECT_TRUE(contains(again.output, "norm_eps")) << again.output;
  EXPECT_TRUE(contains(again.output, "evaluating step 4 again")) << again.output;
  EXPECT_TRUE(contains(again.output, "step-6.json is not reused: it does not verify")) << again.output;
  EXPECT_TRUE(contains(again.output, "evaluating step 6 again")) << again.output;
  EXPECT_FALSE(contains(again.output, "evaluating step 8 again")) << again.output;
  const nlohmann::json s = read_json(out / "S.json");
  EXPECT_NE(s["checkpoints"][1]["schemes"][0]["ppl"], original["checkpoints"][1]["schemes"][0]["ppl"]);  // norm_eps 0.5
  EXPECT_EQ(s["checkpoints"][2]["schemes"], original["checkpoints"][2]["schemes"]);  // step 6 measured anew
  EXPECT_EQ(read_json(out / "S" / "step-4.json").at("model").at("config").at("norm_eps"), 0.5);

  // 3. The series' settings edited to say int8-fine, and a command that asks for it: every step
  // was evaluated with int8-coarse, so every step is evaluated again.
  nlohmann::json edited = s;
  edited["settings"]["schemes"] = "full,int8-fine";
  test::write_bytes(out / "S.json", edited.dump(1) + "\n");
  std::string fine = series_eval(out / "run", out / "S.json");
  fine.replace(fine.find("full,int8-coarse"), 16, "full,int8-fine");
  const CommandResult other = qeval(fine);
  ASSERT_EQ(other.status, 0) << other.output;
  for (int step = 2; step <= 16; step += 2)
    EXPECT_TRUE(contains(other.output, "evaluating step " + std::to_string(step) + " again")) << other.output;
  EXPECT_TRUE(contains(other.output, "it was evaluated with other options (schemes")) << other.output;
  const nlohmann::json fine_series = read_json(out / "S.json");
  EXPECT_EQ(fine_series["checkpoints"][0]["schemes"][1]["name"], "int8-fine");
  EXPECT_EQ(fine_series["evaluation"]["schemes"][1]["name"], "int8-fine");
}

// Issue 63: steps count from 0. A checkpoint whose metadata says step -5 is no trajectory row, and
// a rule's negative warm-up or step is refused instead of selecting the first checkpoint.
TEST_F(SeriesCli, NegativeStepsAndWarmupsAreRefused) {
  test::TempDir out;
  fs::copy(run() / "step-2", out / "ck", fs::copy_options::recursive);
  nlohmann::json config = read_json(out / "ck" / "config.json");
  ASSERT_TRUE(config.at("metadata").contains("step")) << config.dump();
  config["metadata"]["step"] = -5;
  test::write_bytes(out / "ck" / "config.json", config.dump(1));
  test::write_bytes(out / "list.txt", (out / "ck").string() + "\n");
  const CommandResult negative = qeval(series_eval(out / "list.txt", out / "N.json"));
  EXPECT_EQ(negative.status, 2) << negative.output;
  EXPECT_TRUE(contains(negative.output, "metadata.step: should be a count >= 0, found -5")) << negative.output;

  const std::string series = evaluated().string();
  for (const auto& [rule, expected] : std::vector<std::pair<std::string, std::string>>{
           {R"({"quantity": "full.ppl", "reference": "first_past_warmup", "warmup": -1, "max_increase": 1})",
            "\"warmup\" should be a step count >= 0, found -1"},
           {R"({"quantity": "full.ppl", "at": -2, "max": 1e9})", "a step number should be >= 0, found -2"},
           {R"({"quantity": "full.ppl", "reference": -4, "max_increase": 1})", "a step number should be >= 0, found -4"}}) {
    test::write_bytes(out / "rules.json", R"({"rules": [)" + rule + "]}");
    const CommandResult r = qeval("check " + series + " --tolerances " + (out / "rules.json").string());
    EXPECT_EQ(r.status, 2) << rule << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, expected)) << rule << "\n" << r.output;
  }
}

TEST_F(SeriesCli, CheckOnASeriesExitsZeroOneOrTwo) {
  test::TempDir out;
  const std::string series = evaluated().string();
  auto rules = [&](const std::string& name, const std::string& text) {
    test::write_bytes(out / name, text);
    return (out / name).string();
  };
  const std::string generous = rules("ok.json", R"({"rules": [
      {"quantity": "int8-coarse.paired_dnll_mean", "reference": "first_past_warmup", "max_increase": 1.0},
      {"quantity": "full.sink_rate_pct", "at": "every", "max": 100}]})");
  CommandResult pass = qeval("check " + series + " --tolerances " + generous);
  EXPECT_EQ(pass.status, 0) << pass.output;
  EXPECT_TRUE(contains(pass.output, "PASS")) << pass.output;

  const std::string strict = rules("strict.json", R"({"rules": [{"quantity": "full.ppl", "at": "every", "max": 1.5}]})");
  CommandResult fail = qeval("check " + series + " --tolerances " + strict + " --format json");
  EXPECT_EQ(fail.status, 1) << fail.output;
  EXPECT_EQ(nlohmann::json::parse(fail.output).at("violations"), 8);

  const std::string broken = rules("broken.json", R"({"rules": [{"quantity": "int8-fine.dppl", "max": 1}]})");
  CommandResult unusable = qeval("check " + series + " --tolerances " + broken);
  EXPECT_EQ(unusable.status, 2) << unusable.output;
  EXPECT_TRUE(contains(unusable.output, "no scheme 'int8-fine'")) << unusable.output;

  // Against a baseline run at equal steps, with an ordinary tolerance file: itself passes.
  const std::string tolerances = rules("tol.json", R"({"schemes": {"*": {"dppl_abs": 0.01}}})");
  CommandResult same = qeval("check " + series + " --baseline " + series + " --tolerances " + tolerances);
  EXPECT_EQ(same.status, 0) << same.output;
  EXPECT_TRUE(contains(same.output, "step 16 int8-coarse")) << same.output;
  CommandResult no_baseline = qeval("check " + series + " --tolerances " + tolerances);
  EXPECT_EQ(no_baseline.status, 2) << no_baseline.output;
}

}  // namespace
}  // namespace qeval
