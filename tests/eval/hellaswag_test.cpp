// HellaSwag (eval/tasks/hellaswag.h): llama.cpp's 6-line file read, bad files refused naming the
// line; the task selection against llama.cpp's own loop (written out here as perplexity.cpp
// writes it); on stories260K, every ending's log-probability sums against an independent forward
// (Transformer::forward → log_softmax) over exactly the tokens llama.cpp and lm-eval sum, the
// choices that follow, and a quantised scheme's paired counts.
#include "eval/tasks/hellaswag.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "eval/evaluator.h"
#include "eval/schemes.h"
#include "loaders/tokenizers/tokenizer.h"
#include "tests/eval/stories260k_end_to_end.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

const std::string kThreeTasks =
    "Baking cookies: A woman puts flour in a bowl. she\n"
    "2\n"
    "throws the bowl at the wall.\n"
    "eats the flour with a spoon.\n"
    "adds sugar and eggs and stirs.\n"
    "sings a song to the oven.\n"
    "Walking the dog: A man walks down the street with a dog. the dog\n"
    "0\n"
    "sniffs a tree and wags its tail.\n"
    "drives a car to the store.\n"
    "reads a book on the bench.\n"
    "flies over the houses.\n"
    "Swimming: Kids jump into a pool. they\n"
    "1\n"
    "climb a tall mountain.\n"
    "splash each other and laugh.\n"
    "cook dinner in the water.\n"
    "write letters to the pool.\n";

std::filesystem::path write_tasks(const test::TempDir& dir, const std::string& name, const std::string& text) {
  test::write_bytes(dir / name, text);
  return dir / name;
}

TEST(HellaSwagParse, ReadsThreeTasksOfSixLines) {
  test::TempDir dir;
  const auto tasks = read_hellaswag_tasks(write_tasks(dir, "t.txt", kThreeTasks));
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks[0].context, "Baking cookies: A woman puts flour in a bowl. she");
  EXPECT_EQ(tasks[0].gold, 2);
  EXPECT_EQ(tasks[0].endings[2], "adds sugar and eggs and stirs.");
  EXPECT_EQ(tasks[1].gold, 0);
  EXPECT_EQ(tasks[1].endings[3], "flies over the houses.");
  EXPECT_EQ(tasks[2].first_line, 13u);
  EXPECT_EQ(tasks[2].gold, 1);
  // Without the final newline it is the same file.
  const auto again = read_hellaswag_tasks(write_tasks(dir, "u.txt", kThreeTasks.substr(0, kThreeTasks.size() - 1)));
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[2].endings[3], "write letters to the pool.");
}

// The file with line `n` (1-based) replaced by `text` (or removed when `remove`).
std::string with_line(std::size_t n, const std::string& text, bool remove = false) {
  std::istringstream in(kThreeTasks);
  std::string out, line;
  for (std::size_t i = 1; std::getline(in, line); ++i) {
    if (i == n && remove) continue;
    out += (i == n ? text : line) + "\n";
  }
  return out;
}

TEST(HellaSwagParse, BadFilesAreRefusedNamingFileAndLine) {
  test::TempDir dir;
  const std::string f = (dir / "bad.txt").string();
  auto read = [&](const std::string& text) { return [&, text] { read_hellaswag_tasks(write_tasks(dir, "bad.txt", text)); }; };
  EXPECT_TRUE(test::throws_with(read(kThreeTasks + "one more line\n"), {f, "19 lines, not a multiple of 6", "from line 19"}));
  EXPECT_TRUE(test::throws_with(read(with_line(8, "4")), {f, "line 8", "gold ending of task 2", "\"4\""}));
  EXPECT_TRUE(test::throws_with(read(with_line(2, "x")), {f, "line 2", "gold ending of task 1", "\"x\""}));
  // Five endings in task 1: task 2's lines shift by one, and its context stands where its gold label belongs.
  EXPECT_TRUE(test::throws_with(read(with_line(6, "sings a song to the oven.\nand a fifth ending.")),
                                {f, "line 8", "gold ending of task 2", "Walking the dog", "another number of endings"}));
  // Three endings in task 1: task 2's context is read as task 1's fourth ending, its gold label as task 2's context.
  EXPECT_TRUE(test::throws_with(read(with_line(6, "", true)), {f, "line 8", "gold ending of task 2"}));
  EXPECT_TRUE(test::throws_with(read(with_line(4, "")), {f, "line 4", "ending 1 of task 1", "empty line"}));
  EXPECT_TRUE(test::throws_with(read(with_line(7, "  ")), {f, "line 7", "context of task 2", "empty line"}));
  EXPECT_TRUE(test::throws_with(read(""), {f, "empty"}));
  EXPECT_TRUE(test::throws_with([&] { read_hellaswag_tasks(dir / "missing.txt"); }, {"missing.txt", "no such file"}));
  EXPECT_TRUE(test::throws_with([&] { read_hellaswag_tasks(dir.path()); }, {dir.path().string(), "is a folder"}));
}

TEST(HellaSwagParse, ReadsTheSharedValidationFileAsShipped) {
  // llama.cpp's hellaswag_val_full.txt, bzip2-compressed as the shared data holds it.
  const auto tasks = read_hellaswag_tasks(test::data_path("tasks/hellaswag/hellaswag_val_full.txt.bz2"));
  ASSERT_EQ(tasks.size(), 10042u);
  EXPECT_EQ(tasks[0].context, "Roof shingle removal: A man is sitting on a roof. he");
  EXPECT_EQ(tasks[0].gold, 3);
  EXPECT_EQ(tasks[0].endings[3], "starts pulling up roofing on a roof.");
  EXPECT_EQ(tasks.back().first_line, 60247u);
}

// llama.cpp's selection (tools/perplexity/perplexity.cpp, hellaswag_score), as it is written: the
// prompt's lines, a task drawn from those left, its 6 lines erased. The file indices come back
// through the tasks' lines.
std::vector<std::int64_t> llamacpp_selection(std::size_t count, std::size_t hellaswag_tasks) {
  std::vector<std::string> prompt_lines;
  for (std::size_t t = 0; t < count; ++t)
    for (int l = 0; l < 6; ++l) prompt_lines.push_back(std::to_string(t));
  size_t hs_task_count = prompt_lines.size() / 6;
  if (hellaswag_tasks < hs_task_count) hs_task_count = hellaswag_tasks;
  std::mt19937 rng(1);
  std::vector<std::int64_t> out;
  for (size_t i = 0; i < hs_task_count; i++) {
    std::uniform_int_distribution<size_t> dist(0, prompt_lines.size() / 6 - 1);
    const size_t idx = dist(rng);
    out.push_back(std::stoll(prompt_lines[idx * 6]));
    prompt_lines.erase(std::next(prompt_lines.begin(), idx * 6), std::next(prompt_lines.begin(), idx * 6 + 6));
  }
  return out;
}

TEST(HellaSwagSelect, LlamaCppDrawsWithoutReplacementFromMt19937Seed1) {
  for (const auto& [count, n] : std::vector<std::pair<std::size_t, std::size_t>>{{10, 3}, {50, 7}, {10042, 400}, {1000, 999}}) {
    SCOPED_TRACE(fmt::format("{} tasks, {} drawn", count, n));
    const auto got = select_hellaswag_tasks(static_cast<std::int64_t>(count), static_cast<std::int64_t>(n), TaskOrder::llamacpp);
    EXPECT_EQ(got, llamacpp_selection(count, n));
    EXPECT_EQ(std::set<std::int64_t>(got.begin(), got.end()).size(), n) << "drawn without replacement";
  }
}

TEST(HellaSwagSelect, AllTasksWhenTheCountCoversThem) {
  // llama.cpp draws even then: every task once, in its draw order (not file order).
  for (const std::int64_t n : {0, 12, 20}) {
    const auto got = select_hellaswag_tasks(12, n, TaskOrder::llamacpp);
    EXPECT_EQ(got, llamacpp_selection(12, n == 0 ? 12 : static_cast<std::size_t>(n)));
    std::vector<std::int64_t> sorted = got, all(12);
    std::sort(sorted.begin(), sorted.end());
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all);
    EXPECT_EQ(select_hellaswag_tasks(12, n, TaskOrder::first), all);
  }
  EXPECT_EQ(select_hellaswag_tasks(12, 3, TaskOrder::first), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_TRUE(test::throws_with([] { select_hellaswag_tasks(12, -1, TaskOrder::first); }, {"--max-tasks -1"}));
  EXPECT_TRUE(test::throws_with([] { parse_task_order("random"); }, {"--task-order", "llamacpp", "first"}));
}

TEST(HellaSwagStatistics, AccuracyWilsonAndMcNemar) {
  const Accuracy a = accuracy_of(30, 40);
  EXPECT_DOUBLE_EQ(a.accuracy, 0.75);
  EXPECT_NEAR(a.se, std::sqrt(0.75 * 0.25 / 40), 1e-15);
  EXPECT_LT(a.wilson_low, 0.75);
  EXPECT_GT(a.wilson_high, 0.75);
  // Wilson's interval for 30/40 (z = 1.96): 0.5980 .. 0.8581.
  EXPECT_NEAR(a.wilson_low, 0.5980, 5e-4);
  EXPECT_NEAR(a.wilson_high, 0.8581, 5e-4);
  const std::vector<int> gold = {0, 1, 2, 3, 0, 1}, full = {0, 1, 2, 0, 1, 1}, scheme = {0, 2, 2, 3, 2, 1};
  const PairedChoices p = pair_choices(full, scheme, gold);
  EXPECT_EQ(p.right_to_wrong, 1);  // task 1
  EXPECT_EQ(p.wrong_to_right, 1);  // task 3
  EXPECT_EQ(p.changed, 3);         // tasks 1, 3, 4
  EXPECT_DOUBLE_EQ(p.difference, 0.0);
  EXPECT_NEAR(p.mcnemar_se, std::sqrt(2.0) / 6, 1e-15);
}

TEST(HellaSwagStatistics, TiesGoToTheFirstEnding) {
  std::array<EndingScore, 4> s{};
  for (auto& e : s) e = {-2.0, 2, -4.0, 2};
  s[2] = {-2.0, 2, -3.0, 1};
  const TaskChoices c = choose_endings(s, {10, 10, 10, 5});
  EXPECT_EQ(c.llamacpp, 0);      // all four means equal
  EXPECT_EQ(c.lm_eval_acc, 2);   // -3 > -4
  EXPECT_EQ(c.lm_eval_acc_norm, 2);  // -0.3 > -0.4, -0.8
}

// 20 small tasks in the stories' language, built deterministically.
std::vector<HellaSwagTask> story_tasks() {
  const std::vector<std::string> who = {"Lily", "Tom", "The little cat", "Mom", "Ben"};
  const std::vector<std::string> where = {"went to the park", "sat by the window", "found a box", "made a cake"};
  const std::vector<std::string> endings = {"and smiled at the sun.", "and played with a ball all day.",
                                            "but the dog was sad.",  "and they were happy.",
                                            "so she ran home fast.", "and the bird sang a song.",
                                            "then it began to rain.", "and ate a big red apple."};
  std::vector<HellaSwagTask> tasks;
  for (std::size_t i = 0; i < 20; ++i) {
    HellaSwagTask t;
    t.context = "Story: " + who[i % who.size()] + " " + where[(i / who.size()) % where.size()] + ". Then";
    t.gold = static_cast<int>(i % 4);
    for (std::size_t e = 0; e < 4; ++e) t.endings[e] = endings[(i + 3 * e) % endings.size()];
    t.first_line = 6 * i + 1;
    tasks.push_back(t);
  }
  return tasks;
}

class VectorWindows final : public WindowSource {
 public:
  explicit VectorWindows(std::vector<Window> w) : w_(std::move(w)) {}
  std::optional<Window> next() override { return i_ < w_.size() ? std::optional<Window>(w_[i_++]) : std::nullopt; }
  std::int64_t documents_read() const override { return 0; }
  std::int64_t stream_tokens() const override { return 0; }
  std::string data_format() const override { return "test"; }
  nlohmann::json facts() const override { return nlohmann::json::object(); }

 private:
  std::vector<Window> w_;
  std::size_t i_ = 0;
};

TEST(HellaSwagScoring, Stories260kSumsMatchAnIndependentForward) {
  const Transformer model = test::stories260k();
  const auto tokenizer = load_tokenizer(test::data_path("models/stories260K/tok512.bin"));
  ASSERT_TRUE(tokenizer->adds_bos());
  const std::vector<HellaSwagTask> tasks = story_tasks();
  SchemeOptions scheme_options;
  scheme_options.stats_for = StatsFor::none;
  PreparedSchemes prepared = make_schemes(model.config(), {"full", "int8-coarse"}, scheme_options);
  HellaSwagRun run(tasks, select_hellaswag_tasks(20, 0, TaskOrder::first), *tokenizer, prepared.schemes.size());
  for (std::size_t s = 0; s < prepared.schemes.size(); ++s)
    prepared.schemes[s].on_token_values = [&run, s](const std::vector<std::int64_t>& w, const std::vector<std::int64_t>& f,
                                                    const TokenValues& v, const TokenValues&) { run.add_token_values(s, w, f, v); };
  VectorWindows source(run.windows());
  EvalOptions options;
  options.progress = false;
  options.batch_size = 3;
  evaluate(model, prepared.schemes, source, options);

  double worst = 0;
  for (std::size_t k = 0; k < tasks.size(); ++k) {
    // The windows and spans, independently: BOS + encode(context + " " + ending); llama.cpp's
    // common prefix of the four; lm-eval's BOS + encode(context).
    std::array<std::vector<std::int32_t>, 4> ids;
    for (std::size_t e = 0; e < 4; ++e) {
      ids[e] = {*tokenizer->bos_id()};
      for (std::int32_t t : tokenizer->encode(tasks[k].context + " " + tasks[k].endings[e])) ids[e].push_back(t);
    }
    std::size_t common = 0;
    while (ids[0][common] == ids[1][common] && ids[0][common] == ids[2][common] && ids[0][common] == ids[3][common]) ++common;
    const std::size_t context = 1 + tokenizer->encode(tasks[k].context).size();
    ASSERT_EQ(run.tokens()[k].common_prefix, static_cast<std::int64_t>(common)) << "task " << k;
    ASSERT_EQ(run.tokens()[k].context_tokens, static_cast<std::int64_t>(context)) << "task " << k;
    std::array<double, 4> mean{}, sum{}, norm{};
    for (std::size_t e = 0; e < 4; ++e) {
      ASSERT_EQ(run.tokens()[k].tokens[e], ids[e]) << "task " << k << " ending " << e;
      Window w;
      w.tokens = ids[e];
      const at::Tensor nll = test::token_nll(model, {w});  // [L − 1]: token j at j − 1
      double ll = 0, lm = 0;
      for (std::size_t j = common; j < ids[e].size(); ++j) ll -= nll[static_cast<std::int64_t>(j - 1)].item<double>();
      for (std::size_t j = context; j < ids[e].size(); ++j) lm -= nll[static_cast<std::int64_t>(j - 1)].item<double>();
      const EndingScore& got = run.scores(0, k)[e];
      EXPECT_EQ(got.llamacpp_tokens, static_cast<std::int64_t>(ids[e].size() - common));
      EXPECT_EQ(got.lm_eval_tokens, static_cast<std::int64_t>(ids[e].size() - context));
      EXPECT_NEAR(got.llamacpp_sum, ll, 1e-6) << "task " << k << " ending " << e;
      EXPECT_NEAR(got.lm_eval_sum, lm, 1e-6) << "task " << k << " ending " << e;
      worst = std::max({worst, std::abs(got.llamacpp_sum - ll), std::abs(got.lm_eval_sum - lm)});
      mean[e] = ll / static_cast<double>(ids[e].size() - common);
      sum[e] = lm;
      norm[e] = lm / static_cast<double>(tasks[k].endings[e].size());
    }
    const TaskChoices c = run.choices(0)[k];
    EXPECT_EQ(c.llamacpp, std::max_element(mean.begin(), mean.end()) - mean.begin()) << "task " << k;
    EXPECT_EQ(c.lm_eval_acc, std::max_element(sum.begin(), sum.end()) - sum.begin()) << "task " << k;
    EXPECT_EQ(c.lm_eval_acc_norm, std::max_element(norm.begin(), norm.end()) - norm.begin()) << "task " << k;
  }
  std::printf("largest |qeval − independent forward| over the sums: %.3g\n", worst);

  // int8-coarse ran every window; its paired counts add up to the difference of correct counts.
  const std::vector<TaskChoices> full = run.choices(0), coarse = run.choices(1);
  for (std::size_t r = 0; r < 3; ++r) {
    const std::vector<int> f = rule_choices(full, r), q = rule_choices(coarse, r);
    const PairedChoices p = pair_choices(f, q, run.gold());
    std::int64_t correct_full = 0, correct_q = 0, changed = 0;
    for (std::size_t k = 0; k < f.size(); ++k) {
      correct_full += f[k] == run.gold()[k];
      correct_q += q[k] == run.gold()[k];
      changed += f[k] != q[k];
    }
    EXPECT_EQ(p.right_to_wrong - p.wrong_to_right, correct_full - correct_q) << hellaswag_rule_names()[r];
    EXPECT_EQ(p.changed, changed);
    EXPECT_GE(p.changed, p.right_to_wrong + p.wrong_to_right);
    EXPECT_DOUBLE_EQ(p.difference, static_cast<double>(correct_q - correct_full) / 20.0);
  }
  bool moved = false;  // the quantised scheme's scores are its own, not full precision's
  for (std::size_t k = 0; k < tasks.size(); ++k)
    for (std::size_t e = 0; e < 4; ++e) moved = moved || run.scores(1, k)[e].llamacpp_sum != run.scores(0, k)[e].llamacpp_sum;
  EXPECT_TRUE(moved);
}

}  // namespace
}  // namespace qeval
