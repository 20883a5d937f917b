// `qeval eval --model SERIES --out S.json`: every checkpoint of a training run (eval/series_source.h)
// evaluated as `qeval eval` evaluates one, into S/step-N.json, and the series record S.json
// (records/series_record.h) rewritten after each. cli/eval.cpp hands a series over here and gets
// called back once per checkpoint, so a checkpoint's evaluation is exactly a single one's.
//
// Resuming: rerun the same command. A checkpoint whose record is in S/ is not evaluated again; the
// one that was interrupted continues from its state file (S/step-N.json.state.json, eval --resume),
// so the records and the series record end bit-identical to an uninterrupted run's. The options
// that decide the numbers are kept in S.json ("settings"); a rerun with others is refused.
//
// --watch: after evaluating what is there, look again every --watch-poll seconds and evaluate each
// checkpoint once it is complete (eval/series_source.h says when). Stops when the producer says it
// has finished (qeval: checkpoints.json "finished"; HF: a checkpoint at max_steps), when the
// --watch-stop file exists, or after --watch-timeout seconds without a new checkpoint; exit 0 in
// each case, after every complete checkpoint has been evaluated.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace qeval::cli {

struct SeriesArgs {
  std::string mode = "auto";  // auto: a folder of step-N/ or checkpoint-N/ or a list file is a series
  bool watch = false;
  double watch_timeout = 1800;  // seconds without a new checkpoint (0: no limit)
  std::string watch_stop;       // flag file
  double watch_poll = 10;
  double watch_settle = 30;     // HF checkpoints: seconds without a change before one counts as complete
  CLI::App* command = nullptr;  // the eval command, for the settings a series records
};

void add_series_options(CLI::App* cmd, SeriesArgs& args);

// Whether `model` (the --model argument) is to be evaluated as a series.
bool wants_series(const SeriesArgs& args, const std::string& model);

struct SeriesJob {
  std::string model;   // the checkpoint to evaluate
  std::string record;  // its record (--out)
  std::string state;   // its state file (--resume --state-file)
};
// Evaluates one checkpoint as `qeval eval` would; returns the exit status it asks for (0, or 3
// when a --stop-after testing stop ended it).
using EvaluateCheckpoint = std::function<int(const SeriesJob&)>;

void run_series(const SeriesArgs& args, const std::string& model, const std::string& out,
                const EvaluateCheckpoint& evaluate);

}  // namespace qeval::cli
