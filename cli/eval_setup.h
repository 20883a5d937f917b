// What `qeval eval` and the commands built on it (sensitivity) share: the options that name the
// model, tokenizer, data and protocol, and the loading that turns them into a full-precision
// model, a window source and the record's context. One place, so every such command accepts the
// same options and records the same facts.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "common/output_paths.h"
#include "eval/evaluator.h"
#include "eval/model_transforms.h"
#include "eval/memory_plan.h"
#include "records/record.h"
#include "loaders/checkpoints/model_reader.h"
#include "quant/rewrite.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/protocols/protocol.h"
#include "loaders/text/documents.h"
#include "loaders/tokenizers/tokenizer.h"
#include "model/transformer.h"

namespace qeval::cli {

struct EvalDataArgs {
  std::string model = "models/stories260K/stories260K.bin";
  std::string tokenizer;  // default: found beside the model
  std::string data = "text/tinystories/validation-head.txt";
  std::string data_dir;
  std::string protocol = "windows";  // preset name or JSON file; the options below override it when given
  std::int64_t seq_len = 0;          // 0: the protocol's
  std::int64_t stride = 0;           // 0: the protocol's
  std::int64_t max_windows = -1;     // -1: the protocol's
  std::int64_t seed = -1;            // -1: the protocol's
  bool bos_per_window = false;     // --bos-per-window
  bool no_bos_per_window = false;  // --no-bos-per-window; neither: the protocol's (preset: auto)
  std::string separator;             // empty: the protocol's
  std::string bos;                   // empty: the protocol's
  std::string text_split;            // empty: the protocol's, else paragraph
  std::string token_dtype = "auto";
  std::string json_field = "text";
  std::int64_t batch_size = 1;
  int threads = 0;
  std::vector<std::string> transforms;  // --transform, in order (eval/model_transforms.h)
  std::string device = "cpu";           // cpu | cuda | cuda:N
  std::string dtype = "auto";           // fp32 | fp16 | bf16 | auto (fp32 on the CPU, fp16 on a GPU)
  // Memory (eval/memory_plan.h): caps ("300M", "6G"; empty: what the machine has), the plan
  // (auto: the fastest that fits) and its chunk of windows (0: the plan's).
  std::string max_memory, max_device_memory;
  std::string plan = "auto";
  std::int64_t chunk_windows = 0;
};

// Registers the options above on `cmd` (same names, help and checks for every command).
void add_eval_data_options(CLI::App* cmd, EvalDataArgs& args);
// --rounding-band K and --rounding-band-eps (docs/rounding-band.md), for eval (K variants of each
// quantised scheme) and sensitivity (of each unit): `what` names the thing that gets variants.
void add_rounding_band_options(CLI::App* cmd, std::int64_t& band, double& eps, const std::string& what);

struct EvalInputs {
  std::filesystem::path model_path, tokenizer_path, data_path;
  // The full-precision model every scheme starts from, read by parts (transformed, and then in
  // memory, when --transform is given). Opening it read the headers only.
  std::unique_ptr<ModelReader> model;
  std::unique_ptr<Tokenizer> tokenizer;
  ProtocolSpec protocol;  // the preset with the command-line overrides applied
  WindowSourceOptions source_options;
  std::unique_ptr<WindowSource> windows;  // the evaluation windows, not yet read
  Placement placement;                    // where the schemes run (--device, --dtype): blocks are placed after the rewrite
  std::int64_t max_memory = 0, max_device_memory = 0;  // --max-memory, --max-device-memory (0: none)
  // model, tokenizer, data, protocol, precision and the options above; the caller adds its own
  // options and the command line.
  RecordContext context;
  // Whether context.model's weights_hash is set (plan_evaluation without `hash_from_reads`, or
  // finish_weights_hash).
  bool weights_hash_done = false;

  // A fresh source of the evaluation windows (the first one is consumed by the evaluation).
  std::unique_ptr<WindowSource> open_windows() const;
  // Where calibrated schemes calibrate (eval --calibration-data, --calibration-seq-len): empty and
  // 0 are the evaluation's data and seq_len.
  std::filesystem::path calibration_path;
  std::int64_t calibration_seq_len = 0;
  // The first n calibration windows that the evaluation does not use (static activation scales,
  // GPTQ, AWQ: eval/calibration_pass.h, eval/weight_calibration_pass.h; the rule of
  // eval/model_transforms.h): of calibration_path, or of the evaluation data when it is empty.
  CalibrationWindows calibration_windows_from_data(std::int64_t n) const;
};

// Opens everything, failing (naming the file) before any evaluation work; reads the model's
// headers only (its weights too when --transform is given). Sets the thread count.
EvalInputs prepare_eval_inputs(const EvalDataArgs& args);

// The memory plan for these inputs and schemes (eval/memory_plan.h), printed on stderr in one
// line unless `quiet`; throws, before any weight is read, when none fits. With `hash_from_reads`
// the weights hash is left to finish_weights_hash, after the evaluation, which has hashed every
// byte it read (loaders/checkpoints/weights_hash.h); without, it is computed into the record's
// context now (a full read of the tensors; a run that saves state needs it in its identity).
PlanEstimate plan_evaluation(EvalInputs& inputs, const EvalDataArgs& args, const std::vector<EvalScheme>& schemes,
                             const std::vector<std::shared_ptr<SchemeRewrite>>& rewrites, bool quiet,
                             nlohmann::json& plan_json, bool hash_from_reads = false);

// The record's weights hash, completed from the evaluation's reads (reading only the tensor bytes
// the evaluation did not); nothing when plan_evaluation computed it.
void finish_weights_hash(EvalInputs& inputs);

// Every file and folder an evaluation reads, by role, for common/output_paths.h: model, tokenizer,
// data, a protocol file, scheme files among `schemes` (comma-separated) and --transform calib=FILE.
std::vector<RolePath> eval_read_paths(const EvalDataArgs& args, const EvalInputs& inputs, const std::string& schemes);

// After the evaluation has consumed `inputs.windows`: the facts only known then (documents read,
// stream tokens, the protocol's facts) go into the context.
void finish_context(EvalInputs& inputs);

}  // namespace qeval::cli
