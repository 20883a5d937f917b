#include "cli/eval_series.h"

#include "cli/option_checks.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "common/error.h"
#include "common/files.h"
#include "common/printable.h"
#include "reports/compare.h"
#include "records/record.h"
#include "records/series_record.h"
#include "records/record_verify.h"
#include "common/json_diff.h"
#include "model/config.h"
#include "eval/series_source.h"
#include "loaders/checkpoints/model_reader.h"
#include "loaders/checkpoints/weights_hash.h"
#include "reports/series_views.h"

namespace qeval::cli {
namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

// Options that change where results go, how progress looks, how fast it runs or how much memory
// it takes, never the numbers (threads and batch size: CliScale.ThreadsAndBatchSizeDoNotChangeAnyBit;
// the memory plan and its limits: CliScale.EveryMemoryPlanGivesTheSameRecordAndTheRecordNamesIt).
const std::set<std::string> kNotSettings = {
    "out",        "quiet",        "resume",     "state-file",    "checkpoint-seconds", "stop-after",
    "threads",    "batch-size",   "plots",      "plots-colour-scale", "series",         "watch",
    "watch-timeout", "watch-stop", "watch-poll", "watch-settle",  "help",               "config",
    "plan",       "chunk-windows", "max-memory", "max-device-memory"};

// The eval command's resolved options (config file and flags together) that decide the numbers.
nlohmann::json series_settings(const CLI::App* command) {
  nlohmann::json settings = nlohmann::json::object();
  if (!command) return settings;
  std::istringstream in(command->config_to_str(/*default_also=*/true, /*write_description=*/false));
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos || line.front() == '[' || line.front() == '#') continue;
    std::string name = line.substr(0, eq), value = line.substr(eq + 1);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    if (!kNotSettings.count(name)) settings[name] = value;
  }
  return settings;
}

// The value series_settings holds for option NAME left at its default (as CLI11 writes defaults).
std::optional<std::string> default_setting(const CLI::App* command, const std::string& name) {
  const CLI::Option* option = command ? command->get_option_no_throw("--" + name) : nullptr;
  if (!option) return std::nullopt;
  std::string value = option->get_default_str();
  if (value.empty() && option->get_expected_min() == 0) value = "false";  // a flag
  return value;
}

// How a series' recorded settings differ from this command's. A setting the series lacks is of an
// option qeval gained since the series began; the qeval without it behaved as the option's
// default does, so it differs only when this command sets another value. Options that joined
// kNotSettings later may still be in an older series' settings.
std::vector<std::string> settings_differences(nlohmann::json previous, nlohmann::json current, const CLI::App* command) {
  if (!previous.is_object()) previous = nlohmann::json::object();
  for (const auto& key : kNotSettings) previous.erase(key);
  for (auto it = current.begin(); it != current.end();) {
    const auto fallback = default_setting(command, it.key());
    const bool new_at_default = !previous.contains(it.key()) && fallback && it->is_string() && *it == *fallback;
    it = new_at_default ? current.erase(it) : std::next(it);
  }
  if (previous == current) return {};
  return json_differences(previous, current);
}

// Each checkpoint's evaluation prints its own tables; in a series they are progress, and stdout
// keeps only the trajectory at the end.
int with_stdout_on_stderr(const std::function<int()>& f) {
  std::fflush(stdout);
  const int saved = ::dup(1);
  QEVAL_CHECK(saved >= 0 && ::dup2(2, 1) >= 0, "series: could not redirect the checkpoint's tables to stderr");
  auto restore = [&] {
    std::fflush(stdout);
    ::dup2(saved, 1);
    ::close(saved);
  };
  try {
    const int status = f();
    restore();
    return status;
  } catch (...) {
    restore();
    throw;
  }
}

struct Done {
  nlohmann::json entry, evaluation;
};

// Why a step record left by an earlier run cannot stand for checkpoint `c` evaluated with `stamp`
// (empty: it can). It must verify (the one verifier every reader uses), have measured the weights
// and config the checkpoint has now (issue 51: a checkpoint retrained or replaced in place; issue
// 63: a config.json edited beside unchanged weights), and carry this run's stamp: the settings
// and the files besides the checkpoint (tokenizer, data, protocol and scheme files, by path and
// hash). A record without a stamp is an older qeval's and says none of this.
std::string reuse_refusal(const nlohmann::json& record, const fs::path& record_path, const SeriesCheckpoint& c,
                          const nlohmann::json& stamp, const CLI::App* command) {
  try {
    require_verified_record(record, record_path.string(), /*allow_partial=*/false);
  } catch (const Error& e) {
    return fmt::format("it does not verify: {}", e.what());
  }
  const nlohmann::json model = record.value("model", nlohmann::json::object());
  const std::unique_ptr<ModelReader> reader = open_checkpoint(c.path);
  const nlohmann::json recorded_hash = model.value("weights_hash", nlohmann::json(nullptr));
  // Under the definition the record used (an older qeval's hashed the files; loaders/checkpoints/weights_hash.h).
  const std::string kind = recorded_weights_hash_kind(model);
  const std::string now = reader->weights_hash_of_kind(kind);
  if (now.empty())
    return fmt::format("its weights hash is of a kind ({}) this checkpoint's cannot be computed by", kind);
  if (!recorded_hash.is_string() || recorded_hash.get<std::string>() != now)
    return fmt::format("it measured other weights (weights hash {}; {} now has {})", recorded_hash.dump(),
                       c.path.string(), now);
  const nlohmann::json config = config_to_json(reader->config());
  if (model.value("config", nlohmann::json(nullptr)) != config)
    return fmt::format("the checkpoint's config is not the one it measured ({})",
                       fmt::join(json_differences(model.value("config", nlohmann::json(nullptr)), config, 4), "; "));
  if (!record.contains("series_step") || !record["series_step"].is_object())
    return "it does not say with which settings and input files it was evaluated (written by an older qeval)";
  const nlohmann::json& kept = record["series_step"];
  const auto settings = settings_differences(kept.value("settings", nlohmann::json()), stamp.at("settings"), command);
  if (!settings.empty()) return fmt::format("it was evaluated with other options ({})", fmt::join(settings, "; "));
  if (kept.value("inputs", nlohmann::json(nullptr)) != stamp.at("inputs"))
    return fmt::format("it was evaluated on other input files ({})",
                       fmt::join(json_differences(kept.value("inputs", nlohmann::json(nullptr)), stamp.at("inputs"), 4), "; "));
  return "";
}

}  // namespace

void add_series_options(CLI::App* cmd, SeriesArgs& args) {
  args.command = cmd;
  cmd->add_option("--series", args.mode,
                  "auto: --model is a series of checkpoints when it is a folder of step-N/ (qeval train "
                  "--keep-checkpoints) or checkpoint-N/ (HF Trainer) folders, or a list file (.txt, .list: PATH [STEP "
                  "[TOKENS]] a line); on: it must be one; off: evaluate the folder's own checkpoint")
      ->capture_default_str()->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_flag("--watch", args.watch,
                "series: keep evaluating checkpoints as a running trainer writes them; stops when the trainer says it "
                "finished, when --watch-stop exists, or after --watch-timeout seconds without a new checkpoint");
  // Finite numbers only (option_checks.h): "nan" would switch the timeout off, "inf" sleep forever.
  cmd->add_option("--watch-timeout", args.watch_timeout, "--watch: seconds without a new checkpoint before stopping (0: none)")
      ->capture_default_str()->check(number_in(0, 1e9));
  cmd->add_option("--watch-stop", args.watch_stop, "--watch: stop once this file exists (after the checkpoints present)");
  cmd->add_option("--watch-poll", args.watch_poll, "--watch: seconds between looks at the series")
      ->capture_default_str()->check(number_in(0, 1e9, /*lo_open=*/true));
  cmd->add_option("--watch-settle", args.watch_settle,
                  "--watch: an HF checkpoint-N/ counts as complete when no file in it changed for this many seconds")
      ->capture_default_str()->check(number_in(0, 1e9));
}

bool wants_series(const SeriesArgs& args, const std::string& model) {
  if (args.mode == "off") {
    QEVAL_CHECK(!args.watch, "--watch follows a series of checkpoints; --series off evaluates one");
    return false;
  }
  const bool series = is_series_path(model);
  if (args.watch) {  // the trainer may not have written its first checkpoint yet: run_series waits
    QEVAL_CHECK(series || !fs::is_regular_file(model), "--watch: --model {} is a file, not a folder of checkpoints or "
                "a list file (.txt, .list)", model);
    return true;
  }
  QEVAL_CHECK(series || args.mode != "on", "--series on: --model {} is not a folder of step-N/ or checkpoint-N/ "
              "folders, nor a list file (.txt, .list)", model);
  return series;
}

void run_series(const SeriesArgs& args, const std::string& model, const std::string& out,
                const EvaluateCheckpoint& evaluate, const CheckpointInputs& inputs_of) {
  QEVAL_CHECK(!out.empty(), "--model {} is a series of checkpoints: give --out S.json for the series record (each "
              "checkpoint's record goes into S/)", model);
  const fs::path series_path(out);
  QEVAL_CHECK(series_path.extension() == ".json", "--out {}: a series record is a .json file (its checkpoints' records "
              "go into the folder of the same name without .json)", out);
  const fs::path folder = series_path.parent_path() / series_path.stem();
  const std::string folder_name = series_path.stem().string();
  QEVAL_CHECK(series_path.parent_path().empty() || fs::is_directory(series_path.parent_path()),
              "--out {}: folder {} does not exist", out, series_path.parent_path().string());
  const nlohmann::json settings = series_settings(args.command);
  if (fs::exists(series_path)) {
    const nlohmann::json previous = read_series_record(series_path);
    const auto differences = settings_differences(previous.value("settings", nlohmann::json()), settings, args.command);
    QEVAL_CHECK(differences.empty(),
                "--out {}: this series was evaluated with other options ({}); remove {} and {} or choose another --out",
                out, fmt::format("{}", fmt::join(differences, "; ")), out, folder.string());
  }
  fs::create_directories(folder);

  std::map<std::int64_t, Done> done;
  SeriesListing listing;
  auto last_new = clock::now();
  for (bool first_look = true;; first_look = false) {
    // Watching: a folder not created yet, or with no checkpoint yet, is a series still to come.
    listing = args.watch && !is_series_path(model) ? SeriesListing{} : list_series(model, args.watch ? args.watch_settle : 0);
    if (first_look)
      fmt::print(stderr, "series {} ({}): {} checkpoints{}\n", model, to_string(listing.format),
                 listing.checkpoints.size(), args.watch ? ", watching for more" : "");
    for (const auto& c : listing.checkpoints) {
      if (done.count(c.step)) continue;
      const std::string name = fmt::format("step-{}.json", c.step);
      const fs::path record_path = folder / name;
      const nlohmann::json stamp = {{"settings", settings}, {"inputs", inputs_of(c.path.string())}};
      std::optional<nlohmann::json> kept;  // an earlier run's record of this step, read once
      if (fs::exists(record_path)) {
        std::string refusal;
        try {
          kept = read_record(record_path);
          refusal = reuse_refusal(*kept, record_path, c, stamp, args.command);
        } catch (const Error& e) {
          refusal = fmt::format("it cannot be read: {}", e.what());
        }
        if (!refusal.empty()) {
          fmt::print(stderr, "series: {} is not reused: {}; evaluating step {} again\n", record_path.string(), refusal,
                     c.step);
          kept.reset();
        }
      }
      if (kept) {
        fmt::print(stderr, "series: {} (step {}) already evaluated, same checkpoint and evaluation: {}\n", c.name,
                   c.step, record_path.string());
      } else {
        fmt::print(stderr, "series: evaluating {} (step {}{})\n", c.name, c.step,
                   c.tokens ? fmt::format(", {} tokens", *c.tokens) : std::string());
        const SeriesJob job{c.path.string(), record_path.string(), record_path.string() + ".state.json", stamp};
        const int status = with_stdout_on_stderr([&] { return evaluate(job); });
        if (status != 0) {  // a testing stop (--stop-after): the series stops with it, resumable
          exit_status = status;
          return;
        }
      }
      const nlohmann::json record = kept ? std::move(*kept) : read_record(record_path);
      const std::string recorded_model = record.at("model").value("path", "");
      QEVAL_CHECK(recorded_model == utf8_escaped(c.path.string()), "{}: is the record of {}, but step {} of series {} is {}; remove it "
                  "or choose another --out", record_path.string(), recorded_model, c.step, model, c.path.string());
      done[c.step] = {series_entry(c, record, folder_name + "/" + name), series_evaluation_identity(record)};
      std::vector<nlohmann::json> entries, evaluations;
      for (const auto& [step, d] : done) entries.push_back(d.entry), evaluations.push_back(d.evaluation);
      write_file_atomic(series_path, utf8_safe(build_series_record(listing, model, settings, evaluations, entries)).dump(1) + "\n");
      last_new = clock::now();
    }
    if (!args.watch) break;
    if (listing.finished && done.size() >= listing.checkpoints.size()) {
      fmt::print(stderr, "series: the trainer has finished; {} checkpoints evaluated\n", done.size());
      break;
    }
    if (!args.watch_stop.empty() && fs::exists(args.watch_stop)) {
      fmt::print(stderr, "series: {} exists, stopping; {} checkpoints evaluated\n", args.watch_stop, done.size());
      break;
    }
    const double idle = std::chrono::duration<double>(clock::now() - last_new).count();
    if (args.watch_timeout > 0 && idle >= args.watch_timeout) {
      fmt::print(stderr, "series: no new checkpoint for {:.0f} s (--watch-timeout), stopping; {} checkpoints evaluated{}\n",
                 idle, done.size(),
                 listing.pending.empty() ? "" : fmt::format(" ({} incomplete: {})", listing.pending.size(),
                                                            fmt::join(listing.pending, ", ")));
      break;
    }
    // Never past the timeout: a poll longer than what is left of it sleeps only what is left.
    const double left = args.watch_timeout > 0 ? args.watch_timeout - idle : args.watch_poll;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, std::min(args.watch_poll, left))));
  }
  QEVAL_CHECK(!done.empty(), "series {}: no complete checkpoint to evaluate", model);
  fmt::print(stderr, "series record written to {}\n", out);
  fmt::print("{}", format_series({{out, read_series_record(series_path), ""}}, CompareFormat::markdown));
}

}  // namespace qeval::cli
