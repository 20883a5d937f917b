// `qeval eval --model SERIES --out S.json`: every checkpoint of a training run (eval/series_source.h)
// evaluated as `qeval eval` evaluates one, into S/step-N.json, and the series record S.json
// (records/series_record.h) rewritten after each. cli/eval.cpp hands a series over here and gets
// called back once per checkpoint, so a checkpoint's evaluation is exactly a single one's.
//
// Resuming: rerun the same command. A checkpoint whose record is in S/ is not evaluated again when
// that record is of this very checkpoint and evaluation (issue 63): it verifies
// (records/record_verify.h), its weights hash and config are the checkpoint's now, and its
// "series_step" stamp (the settings below and the path and hash of every other file the evaluation
// reads: tokenizer, data, protocol and scheme files) is this run's. Any other record is evaluated
// again, with a note on stderr that says what differs. The one that was interrupted continues from its state file (S/step-N.json.state.json, eval --resume),
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
#include <nlohmann/json.hpp>
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
  // What the step record keeps as "series_step": {"settings", "inputs"}; a later run reuses the
  // record only when its own stamp for the checkpoint is the same.
  nlohmann::json stamp;
};
// The files besides the checkpoint that the evaluation of `model` would read, with their hashes:
// [{"role", "path", "hash"}] (a folder's hash covers the files directly in it).
using CheckpointInputs = std::function<nlohmann::json(const std::string& model)>;
// Evaluates one checkpoint as `qeval eval` would; returns the exit status it asks for (0, or 3
// when a --stop-after testing stop ended it).
using EvaluateCheckpoint = std::function<int(const SeriesJob&)>;

void run_series(const SeriesArgs& args, const std::string& model, const std::string& out,
                const EvaluateCheckpoint& evaluate, const CheckpointInputs& inputs_of);

}  // namespace qeval::cli
