// HellaSwag (issue 80 item 5), scored as llama.cpp's `llama-perplexity --hellaswag` scores it
// (tools/perplexity/perplexity.cpp, hellaswag_score, in llama-cpp-python 0.3.36's vendored
// llama.cpp), with lm-eval's acc and acc_norm beside it, for every scheme against full precision.
//
// The file is llama.cpp's 6-line format, one task per 6 lines: the context (activity label + ": "
// + ctx, preprocessed as lm-eval does), the gold ending's index 0..3, the four endings.
//
// A task is four windows of the evaluator (eval/evaluator.h), one per ending: the tokens of
// context + " " + ending encoded as one string, BOS first when the tokenizer adds one (llama.cpp's
// common_tokenize(..., add_special = true)). Of those, per ending:
//   llama.cpp    the tokens from the four windows' common prefix on (common_prefix .. end): their
//                mean log-probability is the ending's score; the largest wins, the first of equal
//                ones (a later ending must be strictly larger): acc_norm as llama.cpp prints it.
//   lm-eval acc  the tokens after the context's own tokens (len(encode(context)) .. end, lm-eval's
//                _encode_pair on the joint encoding): the sum of their log-probabilities
//                (np.argmax: the first of equal ones).
//   lm-eval acc_norm  that sum divided by the ending's length in characters (Python's len of the
//                ending, UTF-8 code points; the leading space not counted).
// The windows' first scored token is the earlier of the two starts, so one evaluation gives both.
//
// Selection (select_hellaswag_tasks): llama.cpp draws every task, however many, from
// std::mt19937(1) through std::uniform_int_distribution<size_t>(0, remaining − 1) over the tasks
// not yet drawn (without replacement; with N >= the count it is a permutation of all of them).
// "first" takes the first N in file order.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/vocab_scoring.h"
#include "loaders/protocols/protocol.h"
#include "loaders/tokenizers/tokenizer.h"

namespace qeval {

struct HellaSwagTask {
  std::string context;
  int gold = 0;                        // 0..3
  std::array<std::string, 4> endings;
  std::uint64_t first_line = 0;        // 1-based line of its context in the file
};

// Reads the 6-line format. Throws naming the
// file, the line and what was expected: a line count that is not a multiple of 6, a gold label
// other than 0..3 (where a task with another ending count than 4 shows first), an empty context or
// ending, a missing file or a folder. Compressed files (.bz2 as llama.cpp ships it, .gz, .zst) are
// read through loaders/text/compressed_stream.h.
std::vector<HellaSwagTask> read_hellaswag_tasks(const std::filesystem::path& path);

enum class TaskOrder { llamacpp, first };
TaskOrder parse_task_order(const std::string& s);  // "llamacpp" | "first"; throws naming both
std::string to_string(TaskOrder order);

// The file indices of the tasks evaluated, in evaluation order: min(max_tasks, count) of them
// (max_tasks 0: all). Throws for max_tasks < 0.
std::vector<std::int64_t> select_hellaswag_tasks(std::int64_t count, std::int64_t max_tasks, TaskOrder order);

// One selected task tokenised: the four endings' windows and the scored spans.
struct HellaSwagTokens {
  std::array<std::vector<std::int32_t>, 4> tokens;  // BOS (when added) + encode(context + " " + ending)
  std::int64_t common_prefix = 0;   // llama.cpp's first scored position (see hellaswag.cpp for the clamps)
  std::int64_t context_tokens = 0;  // lm-eval's first scored position: BOS + len(encode(context))
  std::array<std::int64_t, 4> ending_chars{};  // lm-eval's acc_norm divisor
  std::int64_t first_scored() const { return std::min(common_prefix, context_tokens); }
};
HellaSwagTokens tokenize_hellaswag_task(const HellaSwagTask& task, const Tokenizer& tokenizer);

// Log-probability sums of one ending's window.
struct EndingScore {
  double llamacpp_sum = 0;   // over tokens [common_prefix, end)
  std::int64_t llamacpp_tokens = 0;
  double lm_eval_sum = 0;    // over tokens [context_tokens, end)
  std::int64_t lm_eval_tokens = 0;
  double llamacpp_mean() const { return llamacpp_sum / static_cast<double>(llamacpp_tokens); }
};

// The three rules' choices for one task from its four endings' scores.
struct TaskChoices {
  int llamacpp = 0, lm_eval_acc = 0, lm_eval_acc_norm = 0;
};
TaskChoices choose_endings(const std::array<EndingScore, 4>& scores, const std::array<std::int64_t, 4>& ending_chars);

// The windows of the selected tasks, and each scheme's ending scores as the evaluator's batches
// arrive (add_token_values from EvalScheme::on_token_values). Window 4·k + e is ending e of the
// k-th selected task. windows() gives them sorted by length (stably), so that windows of one
// length share batches; results do not depend on the order.
class HellaSwagRun {
 public:
  HellaSwagRun(const std::vector<HellaSwagTask>& tasks, std::vector<std::int64_t> selected, const Tokenizer& tokenizer,
               std::size_t schemes);

  std::vector<Window> windows() const;
  std::int64_t longest_window() const;
  const std::vector<std::int64_t>& selected() const { return selected_; }
  const std::vector<HellaSwagTokens>& tokens() const { return tokens_; }
  const std::vector<int>& gold() const { return gold_; }

  // values: [B, L − 1] per-token values of one batch (position p predicts token p + 1).
  void add_token_values(std::size_t scheme, const std::vector<std::int64_t>& windows,
                        const std::vector<std::int64_t>& first_scored, const TokenValues& values);
  // Ending scores of scheme s, task k (throws when a window of it was never scored).
  const std::array<EndingScore, 4>& scores(std::size_t scheme, std::size_t task) const;
  std::vector<TaskChoices> choices(std::size_t scheme) const;

 private:
  std::vector<std::int64_t> selected_;
  std::vector<HellaSwagTokens> tokens_;
  std::vector<int> gold_;
  std::vector<std::vector<std::array<EndingScore, 4>>> scores_;  // [scheme][task]
  std::vector<std::vector<std::uint8_t>> seen_;                  // [scheme][window]
};

// Accuracy over n tasks: correct / n, its standard error sqrt(p (1 − p) / n), and the 95 %
// Wilson score interval llama.cpp prints beside its running acc_norm.
struct Accuracy {
  std::int64_t correct = 0, tasks = 0;
  double accuracy = 0, se = 0, wilson_low = 0, wilson_high = 0;
  nlohmann::json to_json() const;
};
Accuracy accuracy_of(std::int64_t correct, std::int64_t tasks);

// A scheme against full precision under one rule, over the same tasks: right→wrong (full
// precision right, the scheme wrong), wrong→right, choices that differ at all, the difference of
// accuracies and McNemar's standard error of it, sqrt(b + c − (b − c)² / n) / n.
struct PairedChoices {
  std::int64_t right_to_wrong = 0, wrong_to_right = 0, changed = 0, tasks = 0;
  double difference = 0, mcnemar_se = 0;
  nlohmann::json to_json() const;
};
PairedChoices pair_choices(const std::vector<int>& full, const std::vector<int>& scheme, const std::vector<int>& gold);

// Per rule: the accuracies and, for a scheme, the paired counts against full precision (schemes[0]).
// The rules' names in the record and the table: "llamacpp_acc_norm", "lm_eval_acc", "lm_eval_acc_norm".
const std::array<std::string, 3>& hellaswag_rule_names();
std::vector<int> rule_choices(const std::vector<TaskChoices>& choices, std::size_t rule);

}  // namespace qeval
