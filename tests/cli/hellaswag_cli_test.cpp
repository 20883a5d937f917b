// `qeval hellaswag` end to end on stories260K: 10 of 12 hand-written tasks drawn as llama-perplexity
// draws them, two schemes; the record's selection, choices, accuracies and paired counts read back
// and checked against each other; bad options and files refused with one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/hash.h"
#include "eval/tasks/hellaswag.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using test::CommandResult;
using test::contains;

// 12 tasks in the stories' language (llama.cpp's 6-line format).
std::string story_tasks() {
  const char* who[] = {"Lily", "Tom", "The cat", "Mom"};
  const char* endings[] = {"and smiled at the sun.", "and played with a ball.", "but the dog was sad.",
                           "and they were happy.",   "so she ran home fast.",   "then it began to rain."};
  std::string text;
  for (int i = 0; i < 12; ++i) {
    text += fmt::format("Story: {} went to the park with a friend. Then\n{}\n", who[i % 4], i % 4);
    for (int e = 0; e < 4; ++e) text += std::string(endings[(i + 2 * e) % 6]) + "\n";
  }
  return text;
}

const std::string kHellaSwag = "hellaswag -q --threads 1 --tokenizer " + test::kStoriesTokenizer;

TEST(HellaSwagCli, TenTasksTwoSchemesRecord) {
  test::TempDir dir;
  test::write_bytes(dir / "tasks.txt", story_tasks());
  const std::string out = (dir / "hs.json").string();
  const CommandResult r = test::run_qeval(kHellaSwag + " --data-dir " + test::data_dir().string() + " --tasks " +
                                          (dir / "tasks.txt").string() +
                                          " --max-tasks 10 --schemes full,int8-coarse --batch-size 2 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| int8-coarse |")) << r.output;
  const nlohmann::json record = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(record.at("kind"), "hellaswag");
  const nlohmann::json& tasks = record.at("tasks");
  EXPECT_EQ(tasks.at("tasks_in_file"), 12);
  EXPECT_EQ(tasks.at("selection").at("order"), "llamacpp");
  EXPECT_EQ(tasks.at("indices").get<std::vector<std::int64_t>>(), select_hellaswag_tasks(12, 10, TaskOrder::llamacpp));
  EXPECT_EQ(tasks.at("hash"), hash_file(dir / "tasks.txt"));
  const std::vector<int> gold = tasks.at("gold").get<std::vector<int>>();
  ASSERT_EQ(gold.size(), 10u);
  for (std::size_t k = 0; k < gold.size(); ++k) EXPECT_EQ(gold[k], tasks.at("indices")[k].get<int>() % 4);
  ASSERT_EQ(record.at("schemes").size(), 2u);
  EXPECT_EQ(record.at("schemes")[0].at("name"), "full");
  EXPECT_EQ(record.at("schemes")[1].at("name"), "int8-coarse");
  EXPECT_TRUE(record.at("schemes")[1].at("description").contains("execution"));
  for (const std::string& rule : {"llamacpp_acc_norm", "lm_eval_acc", "lm_eval_acc_norm"}) {
    SCOPED_TRACE(rule);
    std::vector<std::vector<int>> chosen;
    std::vector<std::int64_t> correct;
    for (const nlohmann::json& s : record.at("schemes")) {
      chosen.push_back(s.at("hellaswag").at("choices").at(rule).get<std::vector<int>>());
      ASSERT_EQ(chosen.back().size(), 10u);
      std::int64_t c = 0;
      for (std::size_t k = 0; k < 10; ++k) c += chosen.back()[k] == gold[k];
      correct.push_back(c);
      const nlohmann::json& result = s.at("hellaswag").at("results").at(rule);
      EXPECT_EQ(result.at("correct"), c);
      EXPECT_DOUBLE_EQ(result.at("accuracy").get<double>(), static_cast<double>(c) / 10);
    }
    const nlohmann::json& vs = record.at("schemes")[1].at("hellaswag").at("results").at(rule).at("vs_full");
    EXPECT_EQ(vs.at("right_to_wrong").get<std::int64_t>() - vs.at("wrong_to_right").get<std::int64_t>(), correct[0] - correct[1]);
    std::int64_t changed = 0;
    for (std::size_t k = 0; k < 10; ++k) changed += chosen[0][k] != chosen[1][k];
    EXPECT_EQ(vs.at("changed"), changed);
  }
  // The llama.cpp rule's choice is the largest mean log-probability recorded.
  const nlohmann::json& full = record.at("schemes")[0].at("hellaswag");
  for (std::size_t k = 0; k < 10; ++k) {
    const std::vector<double> means = full.at("llamacpp_mean_logprob")[k].get<std::vector<double>>();
    EXPECT_EQ(full.at("choices").at("llamacpp_acc_norm")[k].get<int>(), std::max_element(means.begin(), means.end()) - means.begin());
  }

  // compare, check and plot read eval records: a HellaSwag record is named as what it is (it was
  // 'has no "protocol"').
  const CommandResult compared = test::run_qeval("compare " + out);
  EXPECT_EQ(compared.status, 2) << compared.output;
  EXPECT_TRUE(contains(compared.output, "is a hellaswag record (\"kind\": \"hellaswag\"), not an evaluation record"))
      << compared.output;

  // The first 3 in file order.
  const CommandResult first = test::run_qeval(kHellaSwag + " --tasks " + (dir / "tasks.txt").string() +
                                              " --max-tasks 3 --task-order first --schemes full --out " + out);
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_EQ(nlohmann::json::parse(read_file(out)).at("tasks").at("indices"), nlohmann::json({0, 1, 2}));
}

TEST(HellaSwagCli, CalibratedSchemesCalibrateOnData) {
  test::TempDir dir;
  test::write_bytes(dir / "tasks.txt", story_tasks());
  const std::string out = (dir / "hs.json").string();
  const CommandResult r = test::run_qeval(kHellaSwag + " --tasks " + (dir / "tasks.txt").string() +
                                          " --max-tasks 4 --schemes full,int8-moderate-static --seq-len 64 "
                                          "--calibration-windows 2 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json record = nlohmann::json::parse(read_file(out));
  const std::string description = record.at("schemes")[1].at("description").dump();
  EXPECT_TRUE(contains(description, "validation-head.txt")) << description;  // eval's default --data
  EXPECT_EQ(record.at("schemes")[1].at("hellaswag").at("choices").at("lm_eval_acc").size(), 4u);
}

TEST(HellaSwagCli, BadInputIsRefusedWithOneLine) {
  test::TempDir dir;
  test::write_bytes(dir / "tasks.txt", story_tasks());
  const std::string tasks = " --tasks " + (dir / "tasks.txt").string();
  for (const std::string& n : {"0", "-3"}) {
    const CommandResult r = test::run_qeval(kHellaSwag + tasks + " --max-tasks " + n);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "--max-tasks " + n + ": expected a number of tasks >= 1")) << r.output;
  }
  // Beyond int64 CLI11 saturated it, and it ran as "every task" (probe group tasks).
  const CommandResult huge = test::run_qeval(kHellaSwag + tasks + " --max-tasks 99999999999999999999");
  EXPECT_EQ(huge.status, 2) << huge.output;
  EXPECT_TRUE(contains(huge.output, "--max-tasks: \"99999999999999999999\" is not an integer in")) << huge.output;
  const CommandResult order = test::run_qeval(kHellaSwag + tasks + " --task-order shuffled");
  EXPECT_EQ(order.status, 2) << order.output;
  EXPECT_TRUE(contains(order.output, "--task-order \"shuffled\"")) << order.output;
  test::write_bytes(dir / "short.txt", story_tasks() + "a seventh line\n");
  const CommandResult bad = test::run_qeval(kHellaSwag + " --tasks " + (dir / "short.txt").string());
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, "short.txt: 73 lines, not a multiple of 6")) << bad.output;
  const CommandResult folder = test::run_qeval(kHellaSwag + " --tasks " + dir.path().string());
  EXPECT_EQ(folder.status, 2) << folder.output;
  EXPECT_TRUE(contains(folder.output, "is a folder")) << folder.output;
  // eval's data options choose calibration windows only: without a calibrated scheme they are refused.
  const CommandResult unused = test::run_qeval(kHellaSwag + tasks + " --schemes full,int8-coarse --seq-len 64");
  EXPECT_EQ(unused.status, 2) << unused.output;
  EXPECT_TRUE(contains(unused.output, "--seq-len: sets the calibration of calibrated schemes")) << unused.output;
  // The record never replaces the task file.
  const CommandResult over = test::run_qeval(kHellaSwag + tasks + " --out " + (dir / "tasks.txt").string());
  EXPECT_EQ(over.status, 2) << over.output;
  EXPECT_EQ(read_file(dir / "tasks.txt"), story_tasks());
}

}  // namespace
}  // namespace qeval
