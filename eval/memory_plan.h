// The memory planner (DESIGN.md §11): before any weight is read, works out from the checkpoint's
// headers what each evaluation plan needs at its peak, compares it with the memory at hand and
// the user's caps, and takes the fastest plan that fits; when none fits it refuses with the
// numbers (needed, available, the smallest plan), never an allocator message or the OOM killer.
//
// The plans, fastest first (eval/evaluator.h EvalPlan):
//   resident          every layer read once, every scheme's layers built once and kept; a chunk
//                     is one batch (today's window-major evaluation)
//   resident-weights  full precision kept in memory, each scheme's layers built again per chunk
//                     and dropped (the schemes' memory is one layer's, whatever their number)
//   streamed          nothing kept: each layer is read from the checkpoint, converted, quantised
//                     per scheme, used by the whole chunk and dropped; the embedding is read by
//                     rows and the LM head by vocabulary blocks. Memory is the largest layer plus
//                     the chunk's activations; chunks as large as fit, so the checkpoint is read
//                     as few times as possible.
// Estimates are in bytes and deliberately generous (every transient the forward allocates at
// once, a fixed allowance for the process itself); tests/eval compare them with measured peaks.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "loaders/checkpoints/model_reader.h"
#include "model/placement.h"
#include "quant/schemes/spec.h"

namespace qeval {

struct PlanInputs {
  ModelConfig config;
  PartSizes parts;                   // float32 bytes of each part (ModelReader::part_sizes)
  std::int64_t reader_resident = 0;  // bytes the reader holds whatever is read
  // This process's RSS when planning: the libraries, the tokenizer, the checkpoint's headers and
  // the data stream are already there (0: a fixed allowance stands in for it).
  std::int64_t process_rss = 0;
  bool reader_in_memory = false;     // the reader's parts are views of weights already in memory
  // One entry per scheme, full precision first (nullopt for it).
  std::vector<std::optional<SchemeSpec>> schemes;
  std::vector<bool> attention_statistics;  // per scheme: the observer asks for attention probabilities
  // Schemes that read their own checkpoint of the same shapes (eval/artifact_scheme.h; listed in
  // `schemes` as nullopt): each holds float32 layers and head blocks as full precision does.
  std::int64_t own_checkpoints = 0;
  std::int64_t batch_size = 1;
  std::int64_t seq_len = 0;
  std::int64_t windows = 0;  // windows the run evaluates (0: unknown)
  Placement placement;
};

struct MemoryBudget {
  std::int64_t host = 0;            // bytes the process's RSS may reach
  std::string host_source;          // what decided it ("--max-memory 300 MiB", "MemAvailable ...")
  std::int64_t device = 0;          // GPU bytes (0 on the CPU)
  std::string device_source;
};

// The host's usable memory (common/host_memory.h), capped by --max-memory when given (> 0); on
// a GPU placement, the device's free memory capped by --max-device-memory.
MemoryBudget memory_budget(std::int64_t max_memory, std::int64_t max_device_memory, const Placement& placement);

struct PlanEstimate {
  EvalPlan plan;
  std::int64_t host_bytes = 0;    // estimated peak RSS
  std::int64_t device_bytes = 0;  // estimated peak device memory (0 on the CPU)
  nlohmann::json breakdown;       // the terms, in bytes
  bool fits = false;
};

// Every plan's estimate at the chunk it would run (the largest that fits, or one batch).
std::vector<PlanEstimate> estimate_plans(const PlanInputs& inputs, const MemoryBudget& budget);

// The fastest plan that fits (or `forced`, by name: resident, resident-weights, streamed, with
// `chunk_windows` > 0 forcing the chunk). Throws, before any weight is read, when none fits:
// the message gives each plan's need, what is available and why, and the smallest chunk.
PlanEstimate choose_plan(const PlanInputs& inputs, const MemoryBudget& budget, const std::string& forced = "",
                         std::int64_t chunk_windows = 0);

// One line for stderr: "plan: streamed, chunks of 4 windows (1 pass over 16.1 GB of weights), peak ~5.2 GiB of 22 GiB (MemAvailable …)".
std::string describe(const PlanEstimate& estimate, const MemoryBudget& budget);
// The record's "plan": name, chunk, estimates, budget and its source.
nlohmann::json plan_record(const PlanEstimate& estimate, const MemoryBudget& budget);

}  // namespace qeval
