// `qeval hellaswag`: HellaSwag accuracy per scheme, scored as llama-perplexity --hellaswag scores it
// (acc_norm) with lm-eval's acc and acc_norm beside it, and the paired comparison of every scheme's
// choices with full precision's (eval/tasks/hellaswag.h). Model, tokenizer, device, plan and
// memory options are eval's (cli/eval_setup.h); --data and its protocol options only give
// calibrated schemes their calibration windows. A Markdown table on stdout, the record with --out.
#include <fmt/core.h>

#include <filesystem>
#include <optional>

#include "cli/commands.h"
#include "cli/eval_setup.h"
#include "cli/json_config.h"
#include "cli/option_checks.h"
#include "common/build_info.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "common/host_memory.h"
#include "common/output_paths.h"
#include "common/printable.h"
#include "eval/calibration_pass.h"
#include "eval/schemes.h"
#include "eval/tasks/hellaswag.h"
#include "eval/weight_calibration_pass.h"
#include "loaders/text/compressed_stream.h"
#include "records/record.h"

namespace qeval::cli {
namespace {

struct HellaSwagArgs {
  EvalDataArgs data;  // model, tokenizer, device, plan, threads; --data: calibrated schemes' text
  std::string schemes = "full,int8-coarse,w4-zeropoint-g128";
  std::string tasks;  // default: <data>/tasks/hellaswag/hellaswag_val_full.txt.bz2 (or .txt, .zst, .gz)
  std::int64_t max_tasks = 0;
  bool max_tasks_given = false;
  std::string task_order = "llamacpp";
  bool quantize_lm_head = false;
  std::int64_t calibration_windows = 0;
  std::string imatrix;
  std::string out;
  bool quiet = false;
  std::vector<std::string> argv;
  // eval's data and protocol options given: here they only choose calibrated schemes' windows, and
  // are refused when no scheme calibrates (nothing given is silently ignored).
  std::vector<std::string> calibration_options;
};


std::filesystem::path tasks_path(const HellaSwagArgs& a) {
  const std::optional<std::string> data_dir = a.data.data_dir.empty() ? std::nullopt : std::optional(a.data.data_dir);
  if (!a.tasks.empty()) return resolve_input_path(a.tasks, data_dir);
  const std::filesystem::path dir = resolve_data_dir(data_dir) / "tasks" / "hellaswag";
  // The file as the shared data ships it (bzip2, as llama.cpp distributes it), else a copy.
  for (const char* name : {"hellaswag_val_full.txt.bz2", "hellaswag_val_full.txt", "hellaswag_val_full.txt.zst",
                           "hellaswag_val_full.txt.gz"})
    if (std::filesystem::exists(dir / name)) return dir / name;
  fail("HellaSwag: no task file in {} (hellaswag_val_full.txt.bz2, .txt, .txt.zst, .txt.gz); pass --tasks FILE",
       dir.string());
}

std::string percent(const Accuracy& a) { return fmt::format("{:.2f} ± {:.2f}", 100 * a.accuracy, 100 * a.se); }

void run_hellaswag(const HellaSwagArgs& a) {
  QEVAL_CHECK(!a.max_tasks_given || a.max_tasks >= 1,
              "--max-tasks {}: expected a number of tasks >= 1 (leave it out for every task)", a.max_tasks);
  const TaskOrder order = parse_task_order(a.task_order);
  if (!a.out.empty()) check_output_file(a.out, "--out");
  const std::filesystem::path task_file = tasks_path(a);
  const std::vector<HellaSwagTask> tasks = read_hellaswag_tasks(task_file);  // bad files fail before the model loads
  const std::vector<std::int64_t> selected =
      select_hellaswag_tasks(static_cast<std::int64_t>(tasks.size()), a.max_tasks_given ? a.max_tasks : 0, order);

  EvalInputs inputs = prepare_eval_inputs(a.data);
  QEVAL_CHECK(inputs.tokenizer != nullptr, "HellaSwag: the tasks are text and need a tokenizer; pass --tokenizer");
  std::vector<RolePath> reads = eval_read_paths(a.data, inputs, a.schemes);
  reads.push_back({"--tasks", task_file});
  if (!a.imatrix.empty()) reads.push_back({"--imatrix", a.imatrix});
  check_outputs_apart({{"--out", a.out}}, reads);

  // Calibrated schemes calibrate on the first windows of --data under its protocol: nothing of
  // that text is evaluated here, so no window is excluded.
  const ProtocolSpec calibration_protocol = inputs.protocol;
  auto calibration_source = [&inputs, calibration_protocol](std::int64_t n) {
    CalibrationWindows c = calibration_windows(
        [] { return std::unique_ptr<WindowSource>(); },
        [&](const ProtocolSpec& spec) {
          return open_window_source(inputs.data_path, inputs.tokenizer.get(), spec, inputs.source_options);
        },
        calibration_protocol, /*same_data=*/false, n);
    c.description["path"] = inputs.data_path.string();
    c.description["hash"] = hash_file(inputs.data_path);
    return c;
  };
  SchemeOptions scheme_options;
  scheme_options.stats_for = StatsFor::none;
  scheme_options.quantize_lm_head = a.quantize_lm_head;
  scheme_options.calibration_windows = a.calibration_windows;
  scheme_options.calibration_options = a.calibration_options;
  scheme_options.imatrix = a.imatrix;
  scheme_options.placement = inputs.placement;
  StaticScaleCalibrator calibrator(*inputs.model, calibration_source, inputs.placement, a.data.batch_size);
  scheme_options.calibrate = [&calibrator, &a](const SchemeSpec& spec) {
    if (!a.quiet) fmt::print(stderr, "scheme {}: calibrating static input scales on --data\n", spec.name);
    return calibrator.scales_for(spec);
  };
  WeightCalibrator weight_calibrator(*inputs.model, calibration_source, a.data.batch_size);
  scheme_options.calibrate_weights = [&weight_calibrator, &a](const SchemeSpec& spec) {
    if (!a.quiet) fmt::print(stderr, "scheme {}: calibrating {} weights on --data\n", spec.name, spec.weights.gptq ? "GPTQ" : "AWQ");
    return weight_calibrator.weights_for(spec);
  };
  PreparedSchemes prepared = make_schemes(inputs.model->config(), parse_scheme_list(a.schemes), scheme_options);
  std::vector<EvalScheme>& schemes = prepared.schemes;

  HellaSwagRun run(tasks, selected, *inputs.tokenizer, schemes.size());
  for (std::size_t s = 0; s < schemes.size(); ++s) {
    auto previous = schemes[s].on_token_values;
    schemes[s].on_token_values = [&run, s, previous](const std::vector<std::int64_t>& windows,
                                                     const std::vector<std::int64_t>& first, const TokenValues& values,
                                                     const TokenValues& full) {
      if (previous) previous(windows, first, values, full);
      run.add_token_values(s, windows, first, values);
    };
  }
  const ModelConfig config = inputs.model->config();
  if (config.position == PositionKind::learned)
    QEVAL_CHECK(run.longest_window() <= config.max_seq_len, "HellaSwag: a task's window has {} tokens, more than the {} learned positions of {}",
                run.longest_window(), config.max_seq_len, inputs.model_path.string());
  // The memory plan for these windows: the longest one, and as many as there are.
  inputs.protocol.seq_len = run.longest_window();
  inputs.windows = std::make_unique<WindowList>(run.windows(), "hellaswag tasks");  // sorted by length, so equal lengths batch
  nlohmann::json plan_json;
  const PlanEstimate plan = plan_evaluation(inputs, a.data, schemes, prepared.rewrites, a.quiet, plan_json, true);

  EvalOptions options;
  options.batch_size = a.data.batch_size;
  options.progress = !a.quiet;
  options.expected_windows = inputs.windows->expected_windows();
  options.placement = inputs.placement;
  options.plan = plan.plan;
  const EvalResult result = evaluate(*inputs.model, schemes, *inputs.windows, options);
  finish_weights_hash(inputs);
  prepared.finish_descriptions();

  // Results per scheme and rule; the paired counts against full precision (scheme 0).
  const std::size_t n = selected.size();
  const auto& rules = hellaswag_rule_names();
  std::vector<std::vector<TaskChoices>> choices;
  for (std::size_t s = 0; s < schemes.size(); ++s) choices.push_back(run.choices(s));
  auto correct = [&](const std::vector<int>& chosen) {
    std::int64_t c = 0;
    for (std::size_t k = 0; k < n; ++k) c += chosen[k] == run.gold()[k];
    return c;
  };

  RecordContext& context = inputs.context;
  nlohmann::json record;
  record["schema_version"] = kRecordSchemaVersion;
  record["kind"] = "hellaswag";
  record["qeval"] = {{"version", version()}, {"git_commit", git_commit()}};
  record["command"] = a.argv;
  record["host"] = host_info();
  record["model"] = context.model;
  record["tokenizer"] = context.tokenizer;
  record["tokenizer"]["bos_added"] = inputs.tokenizer->adds_bos() && inputs.tokenizer->bos_id().has_value();
  record["precision"] = context.precision;
  record["options"] = context.options;
  record["options"]["quantize_lm_head"] = a.quantize_lm_head;
  if (a.calibration_windows > 0) record["options"]["calibration_windows"] = a.calibration_windows;
  if (!a.imatrix.empty()) record["options"]["imatrix"] = a.imatrix;
  record["plan"] = plan_json;
  record["plan"]["measured_peak_rss_bytes"] = peak_rss();
  nlohmann::json common_prefix = nlohmann::json::array(), context_tokens = nlohmann::json::array(),
                 ending_tokens = nlohmann::json::array();
  for (const HellaSwagTokens& t : run.tokens()) {
    common_prefix.push_back(t.common_prefix);
    context_tokens.push_back(t.context_tokens);
    ending_tokens.push_back({t.tokens[0].size(), t.tokens[1].size(), t.tokens[2].size(), t.tokens[3].size()});
  }
  record["tasks"] = {
      {"path", task_file.string()},
      {"compression", to_string(compression_from_name(task_file))},
      {"hash", hash_file(task_file)},
      {"tasks_in_file", tasks.size()},
      {"selection",
       {{"order", to_string(order)},
        {"max_tasks", a.max_tasks_given ? nlohmann::json(a.max_tasks) : nlohmann::json("all")},
        {"rule", order == TaskOrder::llamacpp
                     ? "llama-perplexity --hellaswag-tasks N: each task drawn without replacement from the ones left, "
                       "std::mt19937(1) through std::uniform_int_distribution<size_t>(0, left - 1) (libstdc++)"
                     : "the first N tasks in file order"}}},
      {"selected", n},
      {"indices", selected},
      {"gold", run.gold()},
      {"windows_tokens", ending_tokens},  // per task, the four windows' lengths (BOS included)
      {"common_prefix", common_prefix},   // llama.cpp's scored tokens start here
      {"context_tokens", context_tokens}, // lm-eval's scored tokens start here
      {"scored", {{"windows", result.windows}, {"tokens_run", result.processed_tokens}}}};
  nlohmann::json list = nlohmann::json::array();
  const std::vector<std::int64_t> bytes = prepared.linear_weight_bytes();
  std::vector<std::array<Accuracy, 3>> accuracies(schemes.size());
  std::vector<std::array<PairedChoices, 3>> paired(schemes.size());
  for (std::size_t s = 0; s < schemes.size(); ++s) {
    nlohmann::json entry;
    entry["name"] = schemes[s].name;
    entry["description"] = schemes[s].description;
    entry["linear_weight_bytes"] = s < bytes.size() ? bytes[s] : 0;
    nlohmann::json results = nlohmann::json::object(), chosen = nlohmann::json::object();
    for (std::size_t r = 0; r < rules.size(); ++r) {
      const std::vector<int> c = rule_choices(choices[s], r);
      accuracies[s][r] = accuracy_of(correct(c), static_cast<std::int64_t>(n));
      results[rules[r]] = accuracies[s][r].to_json();
      if (s > 0) {
        paired[s][r] = pair_choices(rule_choices(choices[0], r), c, run.gold());
        results[rules[r]]["vs_full"] = paired[s][r].to_json();
      }
      chosen[rules[r]] = c;
    }
    nlohmann::json means = nlohmann::json::array(), sums = nlohmann::json::array();
    for (std::size_t k = 0; k < n; ++k) {
      const auto& sc = run.scores(s, k);
      means.push_back({sc[0].llamacpp_mean(), sc[1].llamacpp_mean(), sc[2].llamacpp_mean(), sc[3].llamacpp_mean()});
      sums.push_back({sc[0].lm_eval_sum, sc[1].lm_eval_sum, sc[2].lm_eval_sum, sc[3].lm_eval_sum});
    }
    entry["hellaswag"] = {{"results", results},
                          {"choices", chosen},
                          {"llamacpp_mean_logprob", means},
                          {"lm_eval_logprob_sum", sums}};
    entry["timing"] = {{"forward_seconds", result.schemes[s].forward_seconds}};
    list.push_back(entry);
  }
  record["schemes"] = list;
  record["timing"] = {{"total_seconds", result.seconds}};
  record = utf8_safe(record);

  fmt::print("HellaSwag: {} on {} tasks of {} ({} order), {} windows\n\n", inputs.model_path.filename().string(), n,
             task_file.filename().string(), to_string(order), result.windows);
  fmt::print("| scheme | acc_norm llama.cpp % ± se | lm-eval acc % ± se | lm-eval acc_norm % ± se | llama.cpp rule vs full: "
             "right→wrong / wrong→right | Δ acc_norm % ± McNemar se |\n");
  fmt::print("|---|---|---|---|---|---|\n");
  for (std::size_t s = 0; s < schemes.size(); ++s) {
    const std::string vs = s == 0 ? "—" : fmt::format("{} / {}", paired[s][0].right_to_wrong, paired[s][0].wrong_to_right);
    const std::string diff =
        s == 0 ? "—" : fmt::format("{:+.2f} ± {:.2f}", 100 * paired[s][0].difference, 100 * paired[s][0].mcnemar_se);
    fmt::print("| {} | {} | {} | {} | {} | {} |\n", markdown_cell(schemes[s].name), percent(accuracies[s][0]),
               percent(accuracies[s][1]), percent(accuracies[s][2]), vs, diff);
  }
  if (!a.out.empty()) {
    write_record(a.out, record);
    fmt::print(stderr, "record written to {}\n", a.out);
  }
}

}  // namespace

void add_hellaswag_command(CLI::App& app) {
  auto args = std::make_shared<HellaSwagArgs>();
  auto* cmd = app.add_subcommand(
      "hellaswag", "HellaSwag accuracy per scheme as llama-perplexity --hellaswag scores it, lm-eval's acc and acc_norm "
                   "beside it, paired against full precision");
  add_json_config(cmd);
  add_eval_data_options(cmd, args->data);
  cmd->add_option("--schemes,-s", args->schemes, "comma-separated scheme presets or JSON spec files; full precision always runs first")
      ->capture_default_str();
  cmd->add_option("--tasks", args->tasks,
                  "llama.cpp's 6-line HellaSwag file (plain text, .bz2, .gz or .zst); default: "
                  "tasks/hellaswag/hellaswag_val_full.txt.bz2 under the data folder");
  cmd->add_option("--max-tasks", args->max_tasks,
                  "evaluate this many tasks, chosen by --task-order (default: every task)")
      ->check(integer_in(-(std::int64_t{1} << 40), std::int64_t{1} << 40))  // a number at all; >= 1 is checked with the reason
      ->each([args](const std::string&) { args->max_tasks_given = true; });
  cmd->add_option("--task-order", args->task_order,
                  "llamacpp: the tasks llama-perplexity --hellaswag-tasks N evaluates, in its order (mt19937(1) draws "
                  "without replacement); first: the first N in file order")
      ->capture_default_str();
  cmd->add_flag("--quantize-lm-head", args->quantize_lm_head, "quantise the LM head too (every scheme)");
  cmd->add_option("--calibration-windows", args->calibration_windows,
                  "calibration windows of every calibrated scheme, the first of --data (0: each spec's own)")
      ->check(integer_in(0, 1 << 20));
  cmd->add_option("--imatrix", args->imatrix, "llama.cpp's importance matrix for every scheme of kind ggml (gguf-*)");
  cmd->add_option("--out,-o", args->out, "write the record (JSON) here, atomically")->check(output_path());
  cmd->add_flag("--quiet,-q", args->quiet, "no progress on stderr");
  cmd->callback([args, cmd] {
    args->argv = command_line;
    args->calibration_options.clear();
    for (const char* option : {"--data", "--protocol", "--seq-len", "--stride", "--max-windows", "--seed", "--bos-per-window",
                               "--no-bos-per-window", "--separator", "--bos", "--text-split", "--token-dtype", "--json-field"})
      if (cmd->count(option) > 0) args->calibration_options.push_back(option);
    run_hellaswag(*args);
  });
}

}  // namespace qeval::cli
