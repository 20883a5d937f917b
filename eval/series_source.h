// A training run's checkpoints as a series (issue 44): where `qeval eval --model X` finds them,
// which are complete, and what each says about its place in the run.
//
// X is a series when it is
//   - a folder with `step-N/` subfolders: `qeval train --keep-checkpoints` (train/kept_checkpoints.h);
//     each folder's config.json "metadata" gives step, tokens_seen, lr, val_loss, train_loss and
//     the recipe's warm-up and length;
//   - a folder with `checkpoint-N/` subfolders: Hugging Face Trainer's output_dir; each
//     checkpoint's trainer_state.json gives global_step, max_steps (the length), num_input_tokens_seen (when
//     the run counted them: include_num_input_tokens_seen) and the log_history (learning_rate,
//     loss, eval_loss at that step);
//   - a list file (`.txt` or `.list`): one checkpoint a line, `PATH [STEP [TOKENS]]`, PATH relative
//     to the list file's folder; `#` starts a comment. A missing STEP is read from the checkpoint
//     (qeval metadata, trainer_state.json) or else from the last number in its name.
// The two folder forms may not be mixed. A folder that holds a checkpoint of its own as well
// (qeval train's --out, HF's output_dir after save_model) is still a series; `--series off`
// evaluates its own checkpoint instead.
//
// When is a checkpoint complete (what --watch waits for):
//   - qeval step-N/: always, once it exists: the trainer writes it under a hidden name and renames
//     it into place;
//   - HF checkpoint-N/: its trainer_state.json parses and no file in the folder changed during the
//     last `settle_seconds` (the Trainer writes its files one by one, in place);
//   - a list line: once it ends with a newline (a writer appends whole lines).
// Finished (no more checkpoints will come): qeval's checkpoints.json says "finished" (the run
// completed its schedule) and every step it lists is present; HF: a complete checkpoint has
// reached the run's max_steps. A list file never says; --watch-timeout and --watch-stop end those.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace qeval {

enum class SeriesFormat { qeval_steps, hf_trainer, list_file };
std::string to_string(SeriesFormat format);

struct SeriesCheckpoint {
  std::string name;                 // "step-100", "checkpoint-500", a list line's path
  std::filesystem::path path;       // what `qeval eval --model` loads
  std::int64_t step = 0;
  std::optional<std::int64_t> tokens;  // tokens seen by this step, when the producer says
  // lr, val_loss, train_loss, warmup, total_steps (the schedule's length): null when unknown
  nlohmann::json training = nlohmann::json::object();
};

struct SeriesListing {
  SeriesFormat format = SeriesFormat::qeval_steps;
  std::filesystem::path source;
  std::vector<SeriesCheckpoint> checkpoints;  // complete ones, by step
  std::vector<std::string> pending;           // present but not complete yet (named)
  bool finished = false;                      // the producer says nothing more will come
};

// Whether `path` names a series (a folder with step-N/ or checkpoint-N/ subfolders, or a list
// file); false for anything else, including paths that do not exist.
bool is_series_path(const std::filesystem::path& path);

// The series at `path`. `settle_seconds` applies to HF checkpoints (0: a checkpoint with a
// trainer_state.json is complete). Throws qeval::Error naming the file for a malformed series:
// two checkpoints of one step, a step-N folder whose metadata says another step, a list line
// naming a missing checkpoint, an unreadable trainer_state.json in a settled checkpoint.
SeriesListing list_series(const std::filesystem::path& path, double settle_seconds = 0);

}  // namespace qeval
