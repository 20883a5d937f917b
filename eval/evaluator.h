// Evaluator: runs every scheme on each window, window-major, against that window's
// full-precision logits (DESIGN.md §4–§6), and keeps per-window rows so that shards and
// resumed runs reduce to exactly the same totals.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/token_scores.h"
#include "loaders/protocols/protocol.h"
#include "model/observer.h"
#include "model/transformer.h"

namespace qeval {

// One model variant to evaluate. The first scheme must be full precision ("full"): the others
// are compared against it.
struct EvalScheme {
  std::string name;
  Transformer model;
  nlohmann::json description = nlohmann::json::object();  // resolved spec + execution report
  // Optional: sees this scheme's forward pass (statistics). Its begin_batch is the caller's.
  std::shared_ptr<ForwardObserver> observer;
  // Called before each batch with the global window indices of its rows.
  std::function<void(const std::vector<std::int64_t>&)> begin_batch;
};

struct EvalResult;

struct EvalOptions {
  std::int64_t batch_size = 1;
  bool progress = true;              // ETA and running PPL on stderr
  std::int64_t expected_windows = 0;  // for the ETA; 0 when unknown
  // Evaluate only windows whose global index it accepts (sharding: index % n == i); all when empty.
  std::function<bool(std::int64_t)> select_window;
  // Called after every batch with everything accumulated so far (checkpointing for --resume).
  std::function<void(const struct EvalResult&)> after_batch;
};

struct SchemeResult {
  std::map<std::int64_t, WindowScores> rows;  // by window index
  double forward_seconds = 0;
  SchemeSummary summary() const { return summarize(rows); }
};

struct EvalResult {
  std::vector<SchemeResult> schemes;  // in the order given
  std::map<std::int64_t, std::uint64_t> window_hashes;  // XXH3 of each window's tokens + first scored
  std::int64_t windows = 0, scored_tokens = 0, processed_tokens = 0;
  bool contains(std::int64_t window) const { return window_hashes.count(window) > 0; }
  double seconds = 0;
  // XXH3 over the per-window hashes in ascending window order: identical for shards merged.
  std::string token_stream_hash() const;
};

// Consumes the stream, starting from `resumed` (a state saved by an interrupted run: windows
// already in it are skipped, so the final result is identical to an uninterrupted run). Windows of different lengths never share a batch (a window whose length
// differs from the batch's flushes it first). Throws (leaving no partial output anywhere) on any error.
EvalResult evaluate(std::vector<EvalScheme>& schemes, WindowSource& windows, const EvalOptions& options,
                    EvalResult resumed = {});

}  // namespace qeval
