// `qeval train --keep-checkpoints`: a series of checkpoints, one `step-N/` folder per kept step,
// beside the run's own (overwritten, resumable) checkpoint in the --out folder, so that
// `qeval eval --model OUT` can follow the run's outliers and sinks over training (issue 44).
//
// Schedule (KeepSchedule::parse):
//   "N"       every N steps (N, 2N, 3N, ...)
//   "log:N"   Pythia-style: 1, 2, 4, 8, ... (powers of two below N), then every N steps
// The last step of the run (the schedule's end, or where --stop-after / --time-limit stopped it)
// is always kept, so a series ends on the model the run produced.
//
// A kept folder is a normal qeval checkpoint (model.safetensors + config.json + the tokenizer;
// no optimizer moments, which only resuming needs and which the run's own checkpoint has).
// config.json's "metadata" carries step, tokens_seen (steps × batch × seq_len, BOS included),
// lr (the rate of the step just taken), train_loss and val_loss (measured at that step).
//
// Completeness: the folder is written as `.step-N.partial/` and renamed to `step-N/` when every
// file is in place, so a `step-N/` folder is always complete (what `qeval eval --watch` relies
// on). After each kept step `checkpoints.json` (atomic) lists the kept steps; its "finished" is
// true once the run has completed its whole schedule: the final marker a watcher stops on.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace qeval::train {

struct KeepSchedule {
  std::int64_t every = 0;  // 0: no kept checkpoints
  bool log_spaced = false;

  static KeepSchedule parse(const std::string& spec);  // "", "N" or "log:N"; throws naming the spec
  bool enabled() const { return every > 0; }
  bool keeps(std::int64_t step) const;  // step >= 1; the run's last step is kept by the trainer
  std::string to_string() const;        // as parse() reads it
};

// The name of a kept step's folder inside the run's --out folder.
std::string kept_folder_name(std::int64_t step);

// Writes `out/step-<step>/` (replacing one a previous, interrupted run left) and updates
// `out/checkpoints.json`. `metadata` goes under config.json's "metadata".
void save_kept_checkpoint(const std::filesystem::path& out, const KeepSchedule& schedule, std::int64_t step,
                          std::int64_t total_steps, const ModelConfig& config, const ModelWeights& weights,
                          const nlohmann::json& metadata, const std::filesystem::path& tokenizer);

// Copies the tokenizer file (or every file of a tokenizer folder) into `dir`, so that
// `qeval eval --model dir` finds it.
void copy_tokenizer_files(const std::filesystem::path& tokenizer, const std::filesystem::path& dir);

}  // namespace qeval::train
