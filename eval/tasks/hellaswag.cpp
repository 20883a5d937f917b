#include "eval/tasks/hellaswag.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/error.h"
#include "common/printable.h"
#include "loaders/text/compressed_stream.h"

namespace qeval {
namespace {

constexpr std::size_t kHellaSwagMaxLineBytes = 1 << 20;  // the longest line of the validation file is 498 bytes

std::string hellaswag_shown(const std::string& line) { return in_quotes(line, 80); }

// Characters as Python's len() counts them (UTF-8 code points): bytes that do not continue one.
std::int64_t hellaswag_chars(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace

std::vector<HellaSwagTask> read_hellaswag_tasks(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::error_code ec;
  QEVAL_CHECK(std::filesystem::exists(path, ec), "HellaSwag tasks {}: no such file", name);
  QEVAL_CHECK(!std::filesystem::is_directory(path, ec),
              "HellaSwag tasks {}: is a folder; expected llama.cpp's 6-line task file (hellaswag_val_full.txt)", name);
  LineReader reader(open_byte_stream(path), kHellaSwagMaxLineBytes);
  std::vector<HellaSwagTask> tasks;
  std::string line;
  HellaSwagTask task;
  std::uint64_t lines = 0;
  while (reader.next(line)) {
    lines = reader.line_number();
    const std::uint64_t n = lines;
    const int slot = static_cast<int>((n - 1) % 6);  // 0 context, 1 gold, 2..5 endings
    const std::uint64_t task_number = (n - 1) / 6 + 1;
    if (slot == 0) {
      task = HellaSwagTask{};
      task.first_line = n;
      QEVAL_CHECK(!is_blank_line(line), "HellaSwag tasks {}: line {}: expected the context of task {}, found an empty line",
                  name, n, task_number);
      task.context = line;
    } else if (slot == 1) {
      // llama.cpp reads it with std::stoi; qeval wants exactly one digit 0..3, so that a task with
      // another ending count than 4 (which shifts every later line) is caught at its first line out of place.
      QEVAL_CHECK(line.size() == 1 && line[0] >= '0' && line[0] <= '3',
                  "HellaSwag tasks {}: line {}: expected the gold ending of task {} (0, 1, 2 or 3), found {}; each task "
                  "is 6 lines: context, gold index, 4 endings (a task with another number of endings shifts the lines "
                  "after it)",
                  name, n, task_number, hellaswag_shown(line));
      task.gold = line[0] - '0';
    } else {
      QEVAL_CHECK(!is_blank_line(line), "HellaSwag tasks {}: line {}: expected ending {} of task {}, found an empty line",
                  name, n, slot - 2, task_number);
      task.endings[static_cast<std::size_t>(slot - 2)] = line;
      if (slot == 5) tasks.push_back(task);
    }
  }
  QEVAL_CHECK(lines > 0, "HellaSwag tasks {}: empty; expected llama.cpp's 6-line tasks", name);
  QEVAL_CHECK(lines % 6 == 0,
              "HellaSwag tasks {}: {} lines, not a multiple of 6: the last task (from line {}) has {} of its 6 lines "
              "(context, gold index, 4 endings)",
              name, lines, lines - lines % 6 + 1, lines % 6);
  return tasks;
}

TaskOrder parse_task_order(const std::string& s) {
  if (s == "llamacpp") return TaskOrder::llamacpp;
  if (s == "first") return TaskOrder::first;
  fail("--task-order {}: expected llamacpp (llama-perplexity's draws) or first (file order)", hellaswag_shown(s));
}

std::string to_string(TaskOrder order) { return order == TaskOrder::llamacpp ? "llamacpp" : "first"; }

std::vector<std::int64_t> select_hellaswag_tasks(std::int64_t count, std::int64_t max_tasks, TaskOrder order) {
  QEVAL_CHECK(max_tasks >= 0, "HellaSwag: --max-tasks {}: expected a positive number of tasks", max_tasks);
  QEVAL_CHECK(count > 0, "HellaSwag: no tasks to select from");
  const std::int64_t n = max_tasks == 0 ? count : std::min(max_tasks, count);
  std::vector<std::int64_t> remaining(static_cast<std::size_t>(count));
  std::iota(remaining.begin(), remaining.end(), 0);
  if (order == TaskOrder::first) {
    remaining.resize(static_cast<std::size_t>(n));
    return remaining;
  }
  // llama.cpp draws each task from the ones left (it erases the drawn task's 6 lines), always,
  // even when n covers every task; the distribution is built anew over the tasks left each time.
  std::mt19937 rng(1);
  std::vector<std::int64_t> selected;
  selected.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::uniform_int_distribution<std::size_t> dist(0, remaining.size() - 1);
    const std::size_t idx = dist(rng);
    selected.push_back(remaining[idx]);
    remaining.erase(remaining.begin() + static_cast<std::ptrdiff_t>(idx));
  }
  return selected;
}

HellaSwagTokens tokenize_hellaswag_task(const HellaSwagTask& task, const Tokenizer& tokenizer) {
  std::vector<std::int32_t> prefix;
  if (tokenizer.adds_bos() && tokenizer.bos_id()) prefix.push_back(*tokenizer.bos_id());
  HellaSwagTokens t;
  std::size_t shortest = SIZE_MAX;
  for (std::size_t e = 0; e < 4; ++e) {
    t.tokens[e] = prefix;
    const std::vector<std::int32_t> ids = tokenizer.encode(task.context + " " + task.endings[e]);
    t.tokens[e].insert(t.tokens[e].end(), ids.begin(), ids.end());
    t.ending_chars[e] = hellaswag_chars(task.endings[e]);
    shortest = std::min(shortest, t.tokens[e].size());
  }
  QEVAL_CHECK(shortest >= 2, "HellaSwag task at line {}: an ending encodes to {} token(s); at least 2 are needed (one predicts the next)",
              task.first_line, shortest);
  std::size_t common = 0;
  while (common < shortest && t.tokens[0][common] == t.tokens[1][common] && t.tokens[0][common] == t.tokens[2][common] &&
         t.tokens[0][common] == t.tokens[3][common])
    ++common;
  // llama.cpp reads past an ending whose tokens are all in the common prefix (every ending the
  // same, or one a prefix of the others) and asks for the logits of the token before position 0
  // when there is no common prefix: here each ending scores at least its last token, and never its first.
  t.common_prefix = static_cast<std::int64_t>(std::clamp<std::size_t>(common, 1, shortest - 1));
  const std::size_t context = prefix.size() + tokenizer.encode(task.context).size();
  t.context_tokens = static_cast<std::int64_t>(std::clamp<std::size_t>(context, 1, shortest - 1));
  return t;
}

TaskChoices choose_endings(const std::array<EndingScore, 4>& scores, const std::array<std::int64_t, 4>& ending_chars) {
  auto first_max = [](const std::array<double, 4>& v) {
    int best = 0;
    for (int e = 1; e < 4; ++e)
      if (v[e] > v[best]) best = e;  // strictly larger: the first of equal ones wins (llama.cpp, np.argmax)
    return best;
  };
  std::array<double, 4> mean{}, sum{}, norm{};
  for (std::size_t e = 0; e < 4; ++e) {
    mean[e] = scores[e].llamacpp_mean();
    sum[e] = scores[e].lm_eval_sum;
    norm[e] = scores[e].lm_eval_sum / static_cast<double>(std::max<std::int64_t>(ending_chars[e], 1));
  }
  return {first_max(mean), first_max(sum), first_max(norm)};
}

HellaSwagRun::HellaSwagRun(const std::vector<HellaSwagTask>& tasks, std::vector<std::int64_t> selected,
                           const Tokenizer& tokenizer, std::size_t schemes)
    : selected_(std::move(selected)) {
  for (const std::int64_t i : selected_) {
    QEVAL_CHECK(i >= 0 && i < static_cast<std::int64_t>(tasks.size()), "HellaSwag: task {} selected of {}", i, tasks.size());
    tokens_.push_back(tokenize_hellaswag_task(tasks[static_cast<std::size_t>(i)], tokenizer));
    gold_.push_back(tasks[static_cast<std::size_t>(i)].gold);
  }
  scores_.assign(schemes, std::vector<std::array<EndingScore, 4>>(selected_.size()));
  seen_.assign(schemes, std::vector<std::uint8_t>(4 * selected_.size(), 0));
}

std::vector<Window> HellaSwagRun::windows() const {
  std::vector<Window> out;
  out.reserve(4 * tokens_.size());
  for (std::size_t k = 0; k < tokens_.size(); ++k)
    for (std::size_t e = 0; e < 4; ++e) {
      Window w;
      w.index = static_cast<std::int64_t>(4 * k + e);
      w.tokens = tokens_[k].tokens[e];
      w.first_scored = tokens_[k].first_scored();
      out.push_back(std::move(w));
    }
  std::stable_sort(out.begin(), out.end(), [](const Window& a, const Window& b) { return a.tokens.size() < b.tokens.size(); });
  return out;
}

std::int64_t HellaSwagRun::longest_window() const {
  std::size_t longest = 0;
  for (const HellaSwagTokens& t : tokens_)
    for (const auto& w : t.tokens) longest = std::max(longest, w.size());
  return static_cast<std::int64_t>(longest);
}

void HellaSwagRun::add_token_values(std::size_t scheme, const std::vector<std::int64_t>& windows,
                                    const std::vector<std::int64_t>& first_scored, const TokenValues& values) {
  QEVAL_CHECK(scheme < scores_.size(), "HellaSwag: scheme {} of {}", scheme, scores_.size());
  const at::Tensor nll = values.nll.to(at::kDouble).contiguous();  // [B, L − 1]
  const std::int64_t P = nll.size(1);
  const double* data = nll.data_ptr<double>();
  for (std::size_t b = 0; b < windows.size(); ++b) {
    const std::int64_t w = windows[b];
    QEVAL_CHECK(w >= 0 && w < static_cast<std::int64_t>(4 * tokens_.size()), "HellaSwag: window {} is not one of the tasks' {}",
                w, 4 * tokens_.size());
    const HellaSwagTokens& t = tokens_[static_cast<std::size_t>(w / 4)];
    const std::size_t e = static_cast<std::size_t>(w % 4);
    QEVAL_CHECK(first_scored[b] == t.first_scored() && P + 1 == static_cast<std::int64_t>(t.tokens[e].size()),
                "HellaSwag: window {} came back with {} tokens from {}, expected {} from {}", w, P + 1, first_scored[b],
                t.tokens[e].size(), t.first_scored());
    EndingScore s;
    // Token j (j >= 1) is predicted at position j − 1; its log-probability is −nll.
    for (std::int64_t j = t.common_prefix; j <= P; ++j) {
      s.llamacpp_sum -= data[static_cast<std::int64_t>(b) * P + j - 1];
      ++s.llamacpp_tokens;
    }
    for (std::int64_t j = t.context_tokens; j <= P; ++j) {
      s.lm_eval_sum -= data[static_cast<std::int64_t>(b) * P + j - 1];
      ++s.lm_eval_tokens;
    }
    scores_[scheme][static_cast<std::size_t>(w / 4)][e] = s;
    seen_[scheme][static_cast<std::size_t>(w)] = 1;
  }
}

const std::array<EndingScore, 4>& HellaSwagRun::scores(std::size_t scheme, std::size_t task) const {
  for (std::size_t e = 0; e < 4; ++e)
    QEVAL_CHECK(seen_.at(scheme).at(4 * task + e), "HellaSwag: scheme {}: ending {} of task {} (file task {}) was not scored",
                scheme, e, task, selected_.at(task));
  return scores_[scheme][task];
}

std::vector<TaskChoices> HellaSwagRun::choices(std::size_t scheme) const {
  std::vector<TaskChoices> out;
  for (std::size_t k = 0; k < tokens_.size(); ++k) out.push_back(choose_endings(scores(scheme, k), tokens_[k].ending_chars));
  return out;
}

nlohmann::json Accuracy::to_json() const {
  return {{"correct", correct}, {"tasks", tasks}, {"accuracy", accuracy}, {"se", se}, {"wilson95", {wilson_low, wilson_high}}};
}

Accuracy accuracy_of(std::int64_t correct, std::int64_t tasks) {
  Accuracy a;
  a.correct = correct;
  a.tasks = tasks;
  if (tasks == 0) return a;
  const double n = static_cast<double>(tasks), p = static_cast<double>(correct) / n;
  a.accuracy = p;
  a.se = std::sqrt(p * (1 - p) / n);
  // llama.cpp's Wilson score interval, as it writes it.
  const double za = 1.95996398454, z = za * za / n;
  const double cnf = z * std::sqrt(n * (4.0 * p * (1 - p) + z)) / (za + za);
  a.wilson_low = (p + z * 0.5 - cnf) / (1.0 + z);
  a.wilson_high = (p + z * 0.5 + cnf) / (1.0 + z);
  return a;
}

nlohmann::json PairedChoices::to_json() const {
  return {{"right_to_wrong", right_to_wrong}, {"wrong_to_right", wrong_to_right}, {"changed", changed},
          {"tasks", tasks},                   {"difference", difference},         {"mcnemar_se", mcnemar_se}};
}

PairedChoices pair_choices(const std::vector<int>& full, const std::vector<int>& scheme, const std::vector<int>& gold) {
  QEVAL_CHECK(full.size() == gold.size() && scheme.size() == gold.size(),
              "HellaSwag: paired choices over {} and {} tasks, with {} gold labels", full.size(), scheme.size(), gold.size());
  PairedChoices p;
  p.tasks = static_cast<std::int64_t>(gold.size());
  for (std::size_t k = 0; k < gold.size(); ++k) {
    const bool f = full[k] == gold[k], s = scheme[k] == gold[k];
    p.right_to_wrong += f && !s;
    p.wrong_to_right += !f && s;
    p.changed += full[k] != scheme[k];
  }
  if (p.tasks == 0) return p;
  const double n = static_cast<double>(p.tasks), b = static_cast<double>(p.right_to_wrong),
               c = static_cast<double>(p.wrong_to_right);
  p.difference = (c - b) / n;
  p.mcnemar_se = std::sqrt(std::max(0.0, b + c - (b - c) * (b - c) / n)) / n;
  return p;
}

const std::array<std::string, 3>& hellaswag_rule_names() {
  static const std::array<std::string, 3> names = {"llamacpp_acc_norm", "lm_eval_acc", "lm_eval_acc_norm"};
  return names;
}

std::vector<int> rule_choices(const std::vector<TaskChoices>& choices, std::size_t rule) {
  std::vector<int> out;
  for (const TaskChoices& c : choices) out.push_back(rule == 0 ? c.llamacpp : rule == 1 ? c.lm_eval_acc : c.lm_eval_acc_norm);
  return out;
}

}  // namespace qeval
