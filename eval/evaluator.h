// Evaluator: runs every scheme on every window against that window's full-precision logits
// (DESIGN.md §4–§6), layer-major (§11): a chunk of windows goes through the embedding, then
// through layer 1 for every scheme, then layer 2, …, then the LM head in vocabulary blocks. Each
// scheme keeps its own hidden states for the chunk. The full-precision weights come from a
// ModelReader (read by parts from the checkpoint, or already in memory), and each scheme's
// blocks are derived from the full-precision block when the plan reaches it.
//
// The plan (EvalPlan) says whether blocks are kept once built (every layer resident) or built
// again for every chunk and dropped (weights streamed), and how many windows make a chunk.
// Window-major evaluation is the plan "everything kept, chunk = one batch". Results do not
// depend on the plan, bit for bit: every window's forward runs the same operations on the same
// shapes in the same order (a chunk goes through a layer batch by batch), per-window sums are
// float64 in window order, and the vocabulary is always scored in the same blocks
// (eval/vocab_scoring.h). Per-window rows let shards and resumed runs reduce to the same totals.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "eval/percentiles.h"
#include "eval/token_scores.h"
#include "eval/vocab_scoring.h"
#include "loaders/checkpoints/model_reader.h"
#include "loaders/protocols/protocol.h"
#include "model/block.h"
#include "model/observer.h"
#include "model/placement.h"
#include "model/transformer.h"

namespace qeval {

// One model variant to evaluate. The first scheme must be full precision: the others are
// compared against it.
struct EvalScheme {
  std::string name;
  nlohmann::json description = nlohmann::json::object();  // resolved spec + execution report
  // This scheme's block from the full-precision block (on the CPU, float32, before placement);
  // empty: the full-precision block itself.
  std::function<Block(const Block&)> rewrite_block;
  // Whether rewrite_block changes anything in that layer (empty: assume it does). A scheme that
  // changes nothing up to some layer shares full precision's hidden state until then.
  std::function<bool(std::int64_t layer)> rewrites_layer;
  // This scheme's LM head from the full-precision head (a float [V, D] linear): empty when the
  // scheme keeps the head in full precision, which then runs in vocabulary blocks. A rewritten
  // head is built once for the run and computes whole logits per batch.
  std::function<std::shared_ptr<const Linear>(const std::shared_ptr<const Linear>&)> rewrite_head;
  // This scheme's token embedding rows from the full-precision rows a batch looks up ([n, D]
  // float32 -> [n, D]): empty when the scheme keeps the embedding (then it shares full precision's
  // stream until its first rewritten layer). Kind ggml's quantize_embedding (quant/schemes/ggml_rules.h).
  std::function<at::Tensor(const at::Tensor&)> rewrite_embedding_rows;
  // Another checkpoint of the full-precision model's shapes that this scheme is (a quantised
  // artifact made from it, eval/artifact_scheme.h): its token embedding, position embedding, final
  // norm and LM head are read from it instead of full precision's (the head in vocabulary blocks,
  // sharing full precision's block where the rows are equal), and rewrite_block reads its blocks.
  // Null for the schemes derived from full precision.
  std::shared_ptr<ModelReader> own_checkpoint;
  // After placement: decorators that watch the block's linears (sensitivity's input recorders).
  std::function<Block(const Block&)> wrap_block;
  // Sees the LM head's input of each batch, [B, L, D] (the final norm's output at every position).
  std::function<void(const at::Tensor&)> on_head_input;
  // Optional: sees this scheme's forward pass (statistics).
  std::shared_ptr<ForwardObserver> observer;
  // Called before each batch goes through a layer, with the global window indices of its rows
  // (the same batch again for each layer).
  std::function<void(const std::vector<std::int64_t>&)> begin_batch;
  // Called with each batch's per-token values once it is scored (sensitivity's per-position ΔNLL).
  std::function<void(const std::vector<std::int64_t>& windows, const std::vector<std::int64_t>& first_scored,
                     const TokenValues& values, const TokenValues& full)>
      on_token_values;
};

// How the evaluation visits the model (eval/memory_plan.h chooses one from the memory at hand).
struct EvalPlan {
  std::string name = "resident";    // for records: resident | resident-weights | streamed
  bool keep_full_blocks = true;     // full-precision blocks (and head blocks) read once and kept
  bool keep_scheme_blocks = true;   // every scheme's blocks built once and kept
  std::int64_t chunk_windows = 0;   // windows through a layer together; 0: one batch
  // Read and rewrite the next layer on another thread while the current one computes (GPU
  // placements, whose host is otherwise idle; the bits are the same either way).
  bool prefetch_next_layer = false;
  // Hand the memory a layer freed back to the system after each layer (common/memory.h). Freed
  // memory is otherwise kept for reuse, which saves faulting it in again (SmolLM2: a third of the
  // run) but lets the resident set sit above the live tensors; the planner asks for it when the
  // plan streams and its estimate is within a factor 2 of the memory it may use.
  bool release_memory_per_layer = false;
};

struct EvalResult;

struct EvalOptions {
  std::int64_t batch_size = 1;
  bool progress = true;              // ETA and running PPL on stderr
  std::int64_t expected_windows = 0;  // for the ETA; 0 when unknown
  // Evaluate only windows whose global index it accepts (sharding: index % n == i); all when empty.
  std::function<bool(std::int64_t)> select_window;
  // Called after every chunk with everything accumulated so far (checkpointing for --resume).
  std::function<void(const struct EvalResult&)> after_batch;
  Placement placement;  // where the blocks run (built on the CPU in float32, then placed)
  EvalPlan plan;
};

struct SchemeResult {
  std::map<std::int64_t, WindowScores> rows;  // by window index
  // Percentiles of the per-token KL and Δp against full precision, when the run kept the values
  // (eval/token_values_file.h; a quantised scheme's, never full precision's).
  std::optional<Distribution> kl_values, dp_values;
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
// already in it are skipped, so the final result is identical to an uninterrupted run). Windows
// of different lengths never share a batch. Throws (leaving no partial output anywhere) on any
// error, and when a weight, a hidden state or a logit is not finite: the message names the
// tensor and its first bad index, or the scheme, the window and the first layer whose output
// is not finite.
EvalResult evaluate(ModelReader& full, std::vector<EvalScheme>& schemes, WindowSource& windows,
                    const EvalOptions& options, EvalResult resumed = {});

// The same over a model already in memory (a reader over its weights).
EvalResult evaluate(const Transformer& full, std::vector<EvalScheme>& schemes, WindowSource& windows,
                    const EvalOptions& options, EvalResult resumed = {});

// A reader over a Transformer's full-precision weights (its float linears as they are). `origin`
// (format, path, weights hash, notes of the checkpoint it came from) is what the reader reports.
std::unique_ptr<ModelReader> transformer_reader(const Transformer& model, const std::string& source = "model");
std::unique_ptr<ModelReader> transformer_reader(const Transformer& model, LoadedCheckpoint origin);

// The window hash the result keeps: XXH3 of its first scored position and tokens.
std::uint64_t window_hash(const Window& window);

}  // namespace qeval
