// Small-scale language-model training (DESIGN.md §8): a qeval::Transformer built from
// ModelWeights whose tensors require grad, next-token cross-entropy on windows of the data
// stream (train/train_data.h), an optimizer from train/optimizer.h, linear warm-up then cosine
// decay, global gradient-norm clipping, periodic validation loss, checkpoints that
// `qeval eval` loads, and resume.
//
// A layer pattern (config layer_mixers / layer_ffns; docs/usage.md "Training a layer pattern")
// trains every tensor but the state-space layers' A, which stays at its S4D-real initialisation.
//
// Determinism: weights come from init_weights(config, seed); batches from BatchOrder(seed);
// there is no dropout, so nothing else draws random numbers. For a given seed and thread
// count, a run is bit-reproducible, and a run resumed from a checkpoint of step k (weights,
// optimizer moments, step, data position) continues bit-identically to the straight run.
//
// Checkpoint folder (written at checkpoint_every, at a time/step stop and at the end; each
// file atomically, the weights first; with `keep`, also a step-N/ series inside it):
//   model.safetensors + config.json   save_qeval_checkpoint; config "optimizer" = kind and
//                                     "metadata" = {"training": recipe, step, losses, ...}
//   optimizer.safetensors             moments by "<param>.<slot>" (not needed by eval)
//   train_state.json                  step, windows consumed, optimizer header, recipe, history
//   the tokenizer file(s)             copied, so `qeval eval --model DIR` finds them
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "loaders/text/documents.h"
#include "model/config.h"
#include "model/weights.h"
#include "train/kept_checkpoints.h"
#include "train/optimizer.h"

namespace qeval::train {

struct TrainOptions {
  ModelConfig model;  // every switch resolved; vocab_size from the tokenizer when 0
  std::filesystem::path data;
  std::filesystem::path tokenizer;
  DocumentOptions documents;
  double val_fraction = 0.05;    // held-out windows at the end of the stream
  std::int64_t val_every = 100;  // steps between validation losses (0: only at the end)
  std::int64_t val_windows = 64; // at most this many held-out windows per validation (0: all)

  std::int64_t seq_len = 128;
  bool bos_per_window = false;   // every window opens with BOS, then seq_len - 1 stream tokens
  std::int64_t batch_size = 16;
  std::int64_t steps = 1000;     // length of the schedule
  double lr = 1e-3;              // peak
  double min_lr_ratio = 0.1;     // cosine ends at lr · min_lr_ratio
  std::int64_t warmup = 100;     // linear from lr/warmup to lr over the first `warmup` steps
  double clip = 1.0;             // global gradient-norm clip (0: off)
  double init_std = 0.02;
  OptimizerOptions optimizer;
  std::uint64_t seed = 0;        // init and batch order (OrthoAdam has its own transform seed)

  std::filesystem::path out;             // checkpoint folder (empty: none)
  std::int64_t checkpoint_every = 0;     // 0: only at the end
  KeepSchedule keep;                     // step-N/ folders kept in `out` (train/kept_checkpoints.h)
  std::filesystem::path resume;          // checkpoint folder to continue from
  std::int64_t stop_after = 0;           // stop (and checkpoint) after this step; 0: run to `steps`
  double time_limit_minutes = 0;         // stop (and checkpoint) when exceeded; 0: none
  std::int64_t log_every = 10;
  bool progress = true;                  // progress lines on stderr

  nlohmann::json to_json() const;  // the recipe, for records
};

struct TrainResult {
  ModelConfig config;
  ModelWeights weights;        // trained (tensors detached from autograd)
  std::int64_t step = 0;       // steps completed
  double last_train_loss = 0;  // mean loss of the last logged interval
  double val_loss = 0;         // last validation loss (NaN when none)
  bool stopped_early = false;  // by stop_after or the time limit
  nlohmann::json history = nlohmann::json::array();
};

// Learning rate of 0-based `step`: lr·(step+1)/warmup during warm-up, then cosine from lr to
// lr·min_lr_ratio over the remaining steps.
double learning_rate(const TrainOptions& options, std::int64_t step);

TrainResult run_training(TrainOptions options);

}  // namespace qeval::train
