#include "cli/eval_setup.h"

#include <ATen/Parallel.h>
#include <fmt/core.h>

#include <optional>
#include <sstream>

#include "cli/json_config.h"
#include "cli/option_checks.h"
#include "common/error.h"
#include "common/phases.h"
#include "common/files.h"
#include "common/hash.h"
#include "common/model_cache.h"
#include "common/host_memory.h"
#include "common/sizes.h"
#include "eval/model_transforms.h"
#include "kernels/compute_threads.h"
#include "kernels/fp32_gemm.h"
#include "loaders/tokenizers/tokenizer_discovery.h"
#include "model/causal_attention_cpu.h"

namespace qeval::cli {
namespace {

std::optional<std::string> opt(const std::string& s) { return s.empty() ? std::nullopt : std::optional<std::string>(s); }

// The preset (or JSON file), then every protocol option given on the command line.
ProtocolSpec resolve_protocol(const EvalDataArgs& a) {
  ProtocolSpec protocol = load_protocol(a.protocol);
  nlohmann::json j = protocol.to_json();
  if (a.seq_len > 0) j["seq_len"] = a.seq_len;
  if (a.stride > 0) j["stride"] = a.stride;
  if (a.max_windows >= 0) j["max_windows"] = a.max_windows;
  if (a.seed >= 0) j["sample_seed"] = a.seed;
  QEVAL_CHECK(!(a.bos_per_window && a.no_bos_per_window), "--bos-per-window and --no-bos-per-window contradict each other");
  if (a.bos_per_window) j["bos_per_window"] = true;
  if (a.no_bos_per_window) j["bos_per_window"] = false;
  if (!a.separator.empty()) j["separator"] = a.separator;
  if (!a.bos.empty()) j["bos"] = a.bos;
  if (!a.text_split.empty()) j["text_split"] = a.text_split;
  return ProtocolSpec::from_json(j, fmt::format("--protocol {} with the command-line options", a.protocol));
}

}  // namespace

void add_eval_data_options(CLI::App* cmd, EvalDataArgs& args) {
  cmd->add_option("--model,-m", args.model, "checkpoint: HF folder, llama2.c .bin, .gguf or qeval folder (relative paths also tried under the data folder), or a model handle: " + model_handles_help())
      ->capture_default_str();
  cmd->add_option("--tokenizer,-t", args.tokenizer, "tokenizer file or folder (default: found beside the model)");
  cmd->add_option("--data,-d", args.data, "validation text: .txt, .jsonl, .json.gz, .jsonl.zst, or pre-tokenised .bin token ids (--token-dtype)")->capture_default_str();
  cmd->add_option("--data-dir", args.data_dir, "shared data folder (default: $QEVAL_DATA_DIR, else ../shared/data)");
  cmd->add_option("--protocol", args.protocol,
                  "evaluation protocol: windows, stride, llamacpp, gptq-c4 (configs/protocols/) or a JSON protocol file; "
                  "the options below override its parameters")
      ->capture_default_str();
  std::string preset_lengths;
  for (const auto& name : protocol_names())
    preset_lengths += fmt::format("{}{} {}", preset_lengths.empty() ? "" : ", ", name, ProtocolSpec::defaults_for(name).seq_len);
  cmd->add_option("--seq-len", args.seq_len,
                  fmt::format("window length in tokens (llamacpp: n_ctx; 0: the protocol's: {})", preset_lengths))
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_option("--stride", args.stride, "stride protocol: tokens each window advances (0: the protocol's)")
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_option("--max-windows", args.max_windows, "number of windows (0: all; gptq-c4: samples; -1: the protocol's)")
      ->capture_default_str()->check(integer_in(-1, 1 << 30));
  cmd->add_option("--seed", args.seed,
                  "windows: sample --max-windows windows with this seed instead of taking the first; gptq-c4: Python "
                  "random seed (-1: the protocol's)")
      ->capture_default_str()->check(integer_in(-1));
  cmd->add_flag("--bos-per-window", args.bos_per_window,
                "windows protocol: start every window with BOS (default auto: yes for GGUF tokenizers whose "
                "tokenizer.ggml.add_bos_token is true, as llama.cpp's perplexity tool and lm-eval do; no otherwise)");
  cmd->add_flag("--no-bos-per-window", args.no_bos_per_window, "windows protocol: never start a window with BOS");
  cmd->add_option("--separator", args.separator, "token opening each document: auto, eos, bos, none (default: the protocol's)")
      ->check(CLI::IsMember({"auto", "eos", "bos", "none"}));
  cmd->add_option("--bos", args.bos, "llamacpp / gptq-c4: add BOS: auto (not for GPT-2 BPE), yes, no (default: the protocol's)")
      ->check(CLI::IsMember({"auto", "yes", "no"}));
  cmd->add_option("--text-split", args.text_split, "plain-text documents: paragraph, line or file (default: the protocol's, else paragraph)")
      ->check(CLI::IsMember({"paragraph", "line", "file"}));
  cmd->add_option("--token-dtype", args.token_dtype, "pre-tokenised .bin data: auto, uint16, uint32")
      ->capture_default_str()->check(CLI::IsMember({"auto", "uint16", "uint32"}));
  cmd->add_option("--json-field", args.json_field, "JSON-lines field holding the text")->capture_default_str();
  cmd->add_option("--batch-size,-b", args.batch_size, "windows per forward pass (results do not depend on it)")
      ->capture_default_str()->check(integer_in(1, 1 << 16));
  cmd->add_option("--threads", args.threads, "CPU threads (0: the cores this process may use; more than the hardware threads are capped, with a note)")->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_option("--transform", args.transforms,
                  "transform the full-precision model before any scheme (repeatable, applied in order): "
                  "rotate[:kind=hadamard|orthogonal,seed=N,online_down=1] or "
                  "smooth[:alpha=0.5,groups=qkv+up+down+o,calib=FILE,calib_windows=16]")
      ->take_all()->allow_extra_args(false);
  cmd->add_option("--device", args.device,
                  "where the models run: cpu, cuda or cuda:N (loading, transforms and weight quantisation run on the "
                  "CPU in fp32 first)")
      ->capture_default_str();
  cmd->add_option("--dtype", args.dtype, "full-precision dtype: fp32, fp16, bf16, fp64 (the CPU only: every float rounding in float64, the reference for rounding bands), or auto (fp32 on the CPU, fp16 on a GPU)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "fp32", "fp16", "bf16", "fp64"}));
  cmd->add_option("--max-memory", args.max_memory,
                  "host memory the evaluation may use, e.g. 300M or 6G (default: what the machine, its cgroup and "
                  "ulimit -v leave); the plan is chosen to fit, or the run refuses before reading weights")
      ->check(byte_size("--max-memory"));
  cmd->add_option("--max-device-memory", args.max_device_memory, "GPU memory the evaluation may use (default: the device's free memory)")
      ->check(byte_size("--max-device-memory"));
  cmd->add_option("--plan", args.plan,
                  "how the model is visited: auto (the fastest that fits), resident (every layer kept), "
                  "resident-weights (full precision kept, schemes rebuilt per chunk), streamed (layers read from the "
                  "checkpoint per chunk of windows); results are the same bits whatever the plan")
      ->capture_default_str()->check(CLI::IsMember({"auto", "resident", "resident-weights", "streamed"}));
  cmd->add_option("--chunk-windows", args.chunk_windows,
                  "windows that go through a layer together in the resident-weights and streamed plans (0: as many as fit)")
      ->capture_default_str()->check(integer_in(0));
}

void add_rounding_band_options(CLI::App* cmd, std::int64_t& band, double& eps, const std::string& what) {
  cmd->add_option("--rounding-band", band,
                  "the rounding band: this many extra evaluations of " + what + " whose quantised linears' inputs move "
                  "by a few float32 ulps (docs/rounding-band.md); 0: none")
      ->capture_default_str()->check(integer_in(0, 64));
  cmd->add_option("--rounding-band-eps", eps,
                  "--rounding-band: the relative size of the input jitter (default 2^-22, two ulps of 1.0)")
      ->check(number_in(0, 1e-3, true, true));
}

std::unique_ptr<WindowSource> EvalInputs::open_windows() const {
  return open_window_source(data_path, tokenizer.get(), protocol, source_options);
}

CalibrationWindows EvalInputs::calibration_windows_from_data(std::int64_t n) const {
  const std::filesystem::path& path = calibration_path.empty() ? data_path : calibration_path;
  // A copy of the evaluation data under another name is the evaluation data.
  const std::string hash = hash_file(path);
  const bool same_data = calibration_path.empty() || std::filesystem::equivalent(calibration_path, data_path) ||
                         hash == hash_file(data_path);
  CalibrationWindows c;
  try {
    c = calibration_windows(
        [&] { return open_windows(); },
        [&](const ProtocolSpec& spec) { return open_window_source(path, tokenizer.get(), spec, source_options); },
        protocol, same_data, n, calibration_seq_len);
  } catch (const Error& e) {
    // Too few windows, a bad file: the message names the file the windows were taken from.
    const std::string message = e.what();
    if (message.find(path.string()) == std::string::npos)
      fail("{} {}: {}", calibration_path.empty() ? "calibration data (the evaluation's)" : "--calibration-data", path.string(),
           message);
    throw;
  }
  c.description["path"] = path.string();
  c.description["hash"] = hash;
  return c;
}

EvalInputs prepare_eval_inputs(const EvalDataArgs& a) {
  // One pool of --threads threads (default: the cores this process may use): LibTorch's. OpenBLAS
  // runs on one thread and its GEMMs are cut into pieces over LibTorch's pool, the same pieces for
  // every thread count, because OpenBLAS's own bits change with its thread count (an AVX2 EPYC: 1
  // and 2 threads differ) and results must not depend on --threads (kernels/compute_threads.h).
  kernels::set_inference_threads(a.threads > 0 ? cap_threads(a.threads) : kernels::available_cores());
  std::vector<TransformSpec> transforms;
  for (const auto& text : a.transforms) transforms.push_back(parse_transform(text));  // bad specs fail before loading
  EvalInputs in;
  in.placement.device = parse_device(a.device);  // no device, or a bad dtype, fails before loading
  in.placement.dtype = parse_dtype(a.dtype, in.placement.device);
  const auto data_dir = opt(a.data_dir);
  in.model_path = resolve_model_path(a.model, data_dir);
  in.data_path = resolve_input_path(a.data, data_dir);

  if (!a.max_memory.empty()) in.max_memory = parse_size(a.max_memory, "--max-memory");
  if (!a.max_device_memory.empty()) in.max_device_memory = parse_size(a.max_device_memory, "--max-device-memory");
  // A cap the run cannot apply is said, not ignored in silence (a config shared by CPU and GPU runs may carry it).
  if (!a.max_device_memory.empty() && !in.placement.device.is_cuda())
    fmt::print(stderr, "note: --max-device-memory {} applies to GPU runs; this run is on the {} and ignores it\n",
               a.max_device_memory, in.placement.device.str());
  in.model = open_checkpoint(in.model_path);  // headers only
  // Pre-tokenised .bin data needs no tokenizer: one is used when given or found beside the model
  // (for its separator and BOS ids), and without one the ids come from the file alone.
  if (!a.tokenizer.empty()) {
    in.tokenizer_path = resolve_input_path(a.tokenizer, data_dir);
  } else {
    auto found = find_tokenizer_beside(in.model_path);
    QEVAL_CHECK(found.has_value() || is_token_file(in.data_path), "no tokenizer found beside {}; pass --tokenizer",
                in.model_path.string());
    if (found) in.tokenizer_path = *found;
  }
  if (!in.tokenizer_path.empty()) in.tokenizer = load_tokenizer(in.tokenizer_path);
  const ModelConfig config = in.model->config();
  if (in.tokenizer)
    QEVAL_CHECK(in.tokenizer->vocab_size() <= config.vocab_size,
                "tokenizer {} has {} tokens but model {} has a vocabulary of {}: they do not belong together",
                in.tokenizer_path.string(), in.tokenizer->vocab_size(), in.model_path.string(), config.vocab_size);

  in.protocol = resolve_protocol(a);
  const bool bos_auto = in.protocol.name == "windows" && in.protocol.bos_per_window_auto;
  in.protocol.resolve_bos_per_window(in.tokenizer.get());  // the record holds the decided value
  if (config.position == PositionKind::learned)
    QEVAL_CHECK(in.protocol.seq_len <= config.max_seq_len, "--seq-len {} exceeds the {} learned positions of {}",
                in.protocol.seq_len, config.max_seq_len, in.model_path.string());

  in.source_options.documents.text_split = in.protocol.text_split.value_or(TextSplit::paragraph);
  in.source_options.documents.json_field = a.json_field;
  in.source_options.token_dtype = parse_token_dtype(a.token_dtype);
  in.source_options.vocab_size = config.vocab_size;
  in.windows = in.open_windows();

  const LoadedCheckpoint info = in.model->info();
  nlohmann::json transform_report = nlohmann::json::array();
  if (!transforms.empty()) {
    // Transforms rewrite the whole model at once: it is read whole, transformed, and served from
    // memory to every plan (the memory plan counts it).
    PhaseScope transform(Phase::transform, kNoScheme);  // reading the model inside is charged to read
    LoadedCheckpoint whole = in.model->read_all();
    const Transformer original(whole.config, std::move(whole.weights), in.model_path.string());
    CalibrationSource calibration = [&](const std::string& path, std::int64_t n) {
      const std::filesystem::path calib_path = path.empty() ? in.data_path : resolve_input_path(path, data_dir);
      const bool same = std::filesystem::equivalent(calib_path, in.data_path);
      CalibrationWindows c = calibration_windows(
          [&] { return in.open_windows(); },
          [&](const ProtocolSpec& spec) { return open_window_source(calib_path, in.tokenizer.get(), spec, in.source_options); },
          in.protocol, same, n);
      c.description["path"] = calib_path.string();
      c.description["hash"] = hash_file(calib_path);
      return c;
    };
    const Transformer transformed = apply_transforms(original, transforms, calibration, transform_report);
    whole.weights = {};
    in.model = transformer_reader(transformed, std::move(whole));  // keeps the checkpoint's format, hash and notes
  }

  RecordContext& context = in.context;
  context.model = {{"path", in.model_path.string()},
                   {"format", info.format},
                   {"weights_hash", nullptr},  // plan_evaluation or finish_weights_hash fills it in
                   {"weights_hash_kind", ModelReader::weights_hash_kind()},  // its definition (loaders/checkpoints/weights_hash.h)
                   {"config", config_to_json(config)},
                   {"parameters", config.parameter_count()},
                   {"notes", info.notes},
                   {"transforms", transform_report}};
  context.tokenizer = in.tokenizer ? nlohmann::json{{"path", in.tokenizer_path.string()},
                                                    {"kind", in.tokenizer->kind()},
                                                    {"vocab_size", in.tokenizer->vocab_size()}}
                                   : nlohmann::json{{"path", nullptr},
                                                    {"note", "pre-tokenised data read without a tokenizer"}};
  if (bos_auto && in.protocol.bos_per_window)
    context.tokenizer["bos_per_window"] = "auto: yes, tokenizer.ggml.add_bos_token is true";
  context.data = {{"path", in.data_path.string()},
                  {"format", in.windows->data_format()},
                  {"hash", hash_file(in.data_path)},
                  {"text_split", to_string(in.source_options.documents.text_split)},
                  {"json_field", a.json_field}};
  context.protocol = in.protocol.to_json();
  context.protocol["separator_id"] = in.windows->facts().value("separator_id", nlohmann::json(nullptr));
  context.precision = {{"dtype", dtype_name(in.placement.dtype)},
                       {"device", in.placement.device.str()},
                       {"device_description", describe_device(in.placement.device)}};
  if (!in.placement.on_cpu()) {
    context.precision["weights_source"] =
        "fp32 on the CPU: each layer is read, transformed and quantised there, then copied to the device";
    context.precision["batch_size_independent"] =
        "integer (int8 kernel) paths yes; float GEMMs and attention run over the whole batch on the GPU and may round "
        "differently for another batch size";
  }
  // Which fp32 GEMM the full-precision linears ran on (kernels/fp32_gemm.h): results differ
  // between backends in the last bits, so shards and resumed runs must agree on it.
  context.options = {{"batch_size", a.batch_size},
                     {"threads", at::get_num_threads()},
                     {"fp32_gemm", kernels::fp32_gemm_description()}};
  // Which CPU attention kernel ran (model/causal_attention_cpu.h): it moves the last bits too.
  if (in.placement.on_cpu()) context.options["cpu_attention"] = cpu_attention_description();
  return in;
}

PlanEstimate plan_evaluation(EvalInputs& in, const EvalDataArgs& a, const std::vector<EvalScheme>& schemes,
                             const std::vector<std::shared_ptr<SchemeRewrite>>& rewrites, bool quiet,
                             nlohmann::json& plan_json, bool hash_from_reads) {
  PlanInputs p;
  p.config = in.model->config();
  p.parts = in.model->part_sizes();
  p.reader_resident = in.model->resident_bytes();
  p.reader_in_memory = in.model->access() == "in memory";
  p.process_rss = read_host_memory().rss;
  for (std::size_t i = 0; i < schemes.size(); ++i) {
    p.schemes.push_back(i < rewrites.size() && rewrites[i] ? std::optional<SchemeSpec>(rewrites[i]->spec()) : std::nullopt);
    bool wants = false;  // attention (or a state-space layer's implicit attention) in any layer
    for (std::int64_t l = 0; l < p.config.n_layers && schemes[i].observer; ++l)
      wants = wants || schemes[i].observer->wants_attention(l) || schemes[i].observer->wants_ssm_selection(l);
    p.attention_statistics.push_back(wants);
    if (schemes[i].own_checkpoint) ++p.own_checkpoints;
  }
  p.batch_size = a.batch_size;
  p.seq_len = in.protocol.seq_len;
  p.windows = in.windows->expected_windows();
  p.placement = in.placement;
  const MemoryBudget budget = memory_budget(in.max_memory, in.max_device_memory, in.placement);
  PlanEstimate chosen = choose_plan(p, budget, a.plan, a.chunk_windows);
  // The hash comes from the bytes the evaluation reads (loaders/checkpoints/weights_hash.h):
  // finish_weights_hash completes it afterwards. A run that needs it before (a state file's
  // identity) hashes now, with a plan that fits: every tensor byte is read for it, once, and
  // the evaluation's reads are not hashed again.
  in.weights_hash_done = !hash_from_reads;
  if (!hash_from_reads) in.context.model["weights_hash"] = in.model->weights_hash();
  if (!quiet) fmt::print(stderr, "{}\n", describe(chosen, budget));
  plan_json = plan_record(chosen, budget);
  return chosen;
}

void finish_weights_hash(EvalInputs& in) {
  if (in.weights_hash_done) return;
  // Reads only what the evaluation did not (embedding rows no window used, tensors no part holds).
  in.context.model["weights_hash"] = in.model->weights_hash();
  in.weights_hash_done = true;
}

void finish_context(EvalInputs& in) {
  in.context.data["documents_read"] = in.windows->documents_read();
  in.context.data["stream_tokens_read"] = in.windows->stream_tokens();
  in.context.protocol["facts"] = in.windows->facts();  // complete now that the stream is consumed
}

std::vector<RolePath> eval_read_paths(const EvalDataArgs& a, const EvalInputs& in, const std::string& schemes) {
  std::vector<RolePath> read = {{"model", in.model_path}, {"tokenizer", in.tokenizer_path}, {"data file", in.data_path}};
  std::error_code ec;
  const auto file_named = [&](const std::string& text) { return !text.empty() && std::filesystem::is_regular_file(text, ec); };
  if (file_named(a.protocol)) read.push_back({"--protocol file", a.protocol});
  std::stringstream list(schemes);
  for (std::string name; std::getline(list, name, ',');)
    if (file_named(name)) read.push_back({"scheme file", name});
  for (const std::string& t : a.transforms)  // calib=FILE inside a --transform spec
    for (std::size_t at = t.find("calib="); at != std::string::npos; at = t.find("calib=", at + 6)) {
      const std::string file = t.substr(at + 6, t.find(',', at) == std::string::npos ? std::string::npos : t.find(',', at) - at - 6);
      if (!file.empty()) read.push_back({"--transform calibration file", resolve_input_path(file, opt(a.data_dir))});
    }
  return read;
}

}  // namespace qeval::cli
