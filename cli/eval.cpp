// `qeval eval`: model + data + schemes → perplexity per scheme, Δ vs full precision, KL,
// statistics; a Markdown table on stdout, progress on stderr, the record with --out.
#include <ATen/Parallel.h>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "cli/eval_series.h"
#include "cli/eval_setup.h"
#include "cli/json_config.h"
#include "cli/option_checks.h"
#include "common/error.h"
#include "common/phases.h"
#include "common/files.h"
#include "common/json_diff.h"
#include "common/hash.h"
#include "common/host_memory.h"
#include "common/model_cache.h"
#include "common/printable.h"
#include "eval/artifact_scheme.h"
#include "eval/calibration_pass.h"
#include "eval/weight_calibration_pass.h"
#include "loaders/tokenizers/tokenizer_discovery.h"
#include "kernels/device.h"
#include "loaders/checkpoints/weights_hash.h"
#include "eval/evaluator.h"
#include "eval/token_values_run.h"
#include "stats/figure_data.h"
#include "reports/plot.h"
#include "records/record.h"
#include "records/rounding_band.h"
#include "eval/rounding_band.h"
#include "records/run_state.h"
#include "eval/schemes.h"
#include "reports/table.h"
#include "quant/rewrite.h"

namespace qeval::cli {
namespace {

struct EvalArgs {
  EvalDataArgs data;  // model, tokenizer, data, protocol, batch size, threads (cli/eval_setup.h)
  std::string schemes = "full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise,w4-zeropoint,w4-zeropoint-g128";
  std::string stats_for = "full";
  bool no_attention_stats = false;
  std::int64_t sink_T = 64;
  std::int64_t mamba_channels = 64;  // docs/families.md: all 1,536 of mamba-130m cost ~160 forwards
  bool mamba_channels_given = false;
  double sink_eps = 0.3;
  bool quantize_lm_head = false;
  bool quantize_ssm_inner = false;
  std::int64_t calibration_windows = 0;  // > 0: every calibrated scheme's windows
  std::string calibration_data;          // calibrated schemes' text (default: the evaluation's, unevaluated windows)
  std::int64_t calibration_seq_len = 0;  // > 0: their windows' length (default: --seq-len)
  std::string imatrix;  // llama.cpp's importance matrix for every scheme of kind ggml
  std::vector<std::string> compare_checkpoints;  // artifacts made from --model, each a row (eval/artifact_scheme.h)
  bool artifact_weights_only = false;            // their declared input activations not applied
  std::int64_t rounding_band = 0;  // variants per quantised scheme (eval/rounding_band.h)
  double rounding_band_eps = 0;    // 0: the default
  std::int64_t rounding_seed = 0;  // > 0: the schemes themselves jittered with this seed
  std::string out;
  std::string plots;  // folder for the pictures (reports/plot.h)
  std::string plots_colour_scale = "linear";
  bool quiet = false;
  std::string shard;        // "i/n": evaluate windows with index % n == i
  bool resume = false;      // checkpoint to a state file as we go; continue from it if present
  std::string state_file;   // default: <out>.state.json
  double checkpoint_seconds = 60;
  std::int64_t stop_after = 0;  // testing aid: stop (exit 3) once this many windows are done
  std::vector<std::string> argv;
  SeriesArgs series;  // --model a folder of checkpoints (cli/eval_series.h)
  std::set<std::string> given;  // options given (flags or --config), for the ones that need another to act
  nlohmann::json series_stamp;  // one checkpoint of a series: the record's "series_step" (SeriesJob::stamp)
};

struct StoppedEarly {
  std::int64_t windows;
};

struct Shard {
  std::int64_t index = 0, count = 1;
};

// The windows the protocol gave, in the order given: a count while they are 0, 1, 2, ..., the list
// once they are not (sampled windows).
struct ProtocolWindows {
  std::int64_t count = 0;
  bool sequential = true;
  std::vector<std::int64_t> indices;
  void add(std::int64_t w) {
    if (sequential && w != count) {
      sequential = false;
      for (std::int64_t i = 0; i < count; ++i) indices.push_back(i);
    }
    if (!sequential) indices.push_back(w);
    ++count;
  }
};

Shard parse_shard(const std::string& text) {
  if (text.empty()) return {};
  Shard s;
  char slash = 0;
  std::istringstream in(text);
  in >> s.index >> slash >> s.count;
  QEVAL_CHECK(in && slash == '/' && in.peek() == EOF && s.count >= 1 && s.index >= 0 && s.index < s.count,
              "--shard '{}': expected i/n with 0 <= i < n (e.g. 0/4)", text);
  return s;
}

// The state of an interrupted run, checked before a single row is kept: it must be a state file of
// this very evaluation (identity), pass its checksum and every rule of run_state_from_json, and each
// kept window must be the window the data gives at its index (hash and scored tokens).
EvalResult load_resume_state(const std::string& state_path, const nlohmann::json& identity, PreparedSchemes& prepared,
                             const EvalInputs& inputs, const std::function<bool(std::int64_t)>& in_shard) {
  QEVAL_CHECK(std::filesystem::is_regular_file(state_path), "--resume: {} is not a file", state_path);
  nlohmann::json saved = nlohmann::json::parse(read_file(state_path), nullptr, /*allow_exceptions=*/false);
  QEVAL_CHECK(saved.is_object() && saved.contains("identity") && saved.contains("state"),
              "--resume: {} is not a qeval evaluation state file", state_path);
  // A state saved by a build that hashed the weights by another definition cannot be matched to
  // these weights (docs/weights-hash.md): say that, not that the evaluation differs.
  const nlohmann::json& saved_identity = saved["identity"];
  const nlohmann::json saved_kind = saved_identity.is_object() && saved_identity.contains("model_weights_kind")
                                        ? saved_identity["model_weights_kind"]
                                        : nlohmann::json(kLegacyWeightsHashKind);
  QEVAL_CHECK(saved_kind == identity.at("model_weights_kind"),
              "--resume: {} was saved by a qeval build that hashed the weights by another definition ({}; this build: "
              "{}), so its windows cannot be matched to these weights; finish it with that build, or remove it or drop "
              "--resume to start again",
              state_path, saved_kind.dump(), identity.at("model_weights_kind").dump());
  QEVAL_CHECK(saved["identity"] == identity,
              "--resume: {} was written by a different evaluation (the state's vs this run's: {}); remove it or drop "
              "--resume", state_path, fmt::join(json_differences(saved["identity"], identity, 4), "; "));
  SchemeMeasuresList measures;
  EvalResult resumed =
      run_state_from_json(saved["state"], prepared.statistics, state_path, inputs.protocol.seq_len, &measures);
  std::unique_ptr<WindowSource> windows = inputs.open_windows();
  verify_resumed_windows(resumed, *windows, in_shard, state_path);
  prepared.add_measures(measures, state_path);  // the earlier windows' KV error and kept positions
  return resumed;
}

// Every file an evaluation with these options reads: eval_read_paths's (model, tokenizer, data,
// protocol, scheme and transform calibration files) and eval's own (--imatrix, --calibration-data).
std::vector<RolePath> eval_reads(const EvalArgs& a, const EvalInputs& inputs) {
  std::vector<RolePath> reads = eval_read_paths(a.data, inputs, a.schemes);
  const std::optional<std::string> data_dir = a.data.data_dir.empty() ? std::nullopt : std::optional(a.data.data_dir);
  if (!a.imatrix.empty()) reads.push_back({"--imatrix", a.imatrix});
  for (const std::string& artifact : a.compare_checkpoints) reads.push_back({"--compare-checkpoint", artifact});
  if (!a.calibration_data.empty()) reads.push_back({"--calibration-data", resolve_input_path(a.calibration_data, data_dir)});
  return reads;
}

// The files besides the checkpoint `model` that evaluating it with these options reads, each with
// its path and content hash (a folder: the hash of its files' names and hashes), for a series'
// step records (SeriesJob::stamp): tokenizer, data, protocol, scheme and calibration files.
nlohmann::json checkpoint_inputs(const EvalArgs& a, const std::string& model) {
  const std::optional<std::string> data_dir = a.data.data_dir.empty() ? std::nullopt : std::optional(a.data.data_dir);
  EvalInputs paths;
  paths.model_path = resolve_model_path(model, data_dir);
  paths.data_path = resolve_input_path(a.data.data, data_dir);
  if (!a.data.tokenizer.empty())
    paths.tokenizer_path = resolve_input_path(a.data.tokenizer, data_dir);
  else if (auto found = find_tokenizer_beside(paths.model_path))
    paths.tokenizer_path = *found;
  nlohmann::json inputs = nlohmann::json::array();
  for (const RolePath& read : eval_reads(a, paths)) {
    if (read.role == "model" || read.path.empty()) continue;
    std::error_code ec;
    std::string hash;
    if (std::filesystem::is_regular_file(read.path, ec)) {
      hash = hash_file(read.path);
    } else if (std::filesystem::is_directory(read.path, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(read.path, ec))
        if (entry.is_regular_file(ec)) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      Hasher hasher;
      for (const auto& f : files) hasher.update(f.filename().string() + " " + hash_file(f) + "\n");
      hash = hasher.hex();
    }
    inputs.push_back({{"role", read.role}, {"path", utf8_escaped(std::filesystem::absolute(read.path).lexically_normal().string())},
                      {"hash", hash.empty() ? nlohmann::json(nullptr) : nlohmann::json(hash)}});
  }
  return inputs;
}

// Options that act only through another option are refused without it (issue 63: nothing given
// is silently ignored).
void check_options_take_effect(const EvalArgs& a) {
  QEVAL_CHECK(a.rounding_band_eps == 0 || a.rounding_band > 0 || a.rounding_seed > 0,
              "--rounding-band-eps {}: sizes the input jitter of --rounding-band and --rounding-seed, and neither is "
              "given; add --rounding-band K or leave it out", a.rounding_band_eps);
  const bool attention_statistics = !a.no_attention_stats && a.stats_for != "none";
  const std::string why_not = a.stats_for == "none" ? "--stats-for none" : "--no-attention-stats";
  QEVAL_CHECK(!a.mamba_channels_given || attention_statistics,
              "--mamba-channels {}: chooses the channels of the Mamba layers' implicit attention, which {} does not "
              "measure; leave one of them out", a.mamba_channels, why_not);
  for (const char* option : {"--sink-T", "--sink-eps"})
    QEVAL_CHECK(!a.given.count(option) || attention_statistics,
                "{}: the sink rate is an attention statistic, which {} does not measure; leave one of them out", option,
                why_not);
  QEVAL_CHECK(!a.given.count("--plots-colour-scale") || !a.plots.empty(),
              "--plots-colour-scale: colours the --plots maps, and no --plots folder is given");
}

// Each quantised scheme's rounding variants (--rounding-band) or its own jitter (--rounding-seed)
// need a quantised scheme and an ε that moves inputs of the run's dtype; refused otherwise, never
// measured as a band of exactly 0.
void check_rounding_options(const EvalArgs& a, const PreparedSchemes& prepared, at::ScalarType dtype) {
  if (a.rounding_band == 0 && a.rounding_seed == 0) return;
  const std::string option = a.rounding_band > 0 ? fmt::format("--rounding-band {}", a.rounding_band)
                                                 : fmt::format("--rounding-seed {}", a.rounding_seed);
  const bool quantised = std::any_of(prepared.rewrites.begin(), prepared.rewrites.end(),
                                     [](const std::shared_ptr<SchemeRewrite>& r) { return r != nullptr; });
  QEVAL_CHECK(quantised, "{}: --schemes {} has no quantised scheme to vary (full precision is never jittered); add "
              "one or leave {} out", option, a.schemes, a.rounding_band > 0 ? "--rounding-band" : "--rounding-seed");
  check_rounding_eps(a.rounding_band_eps > 0 ? a.rounding_band_eps : kDefaultRoundingEps, dtype);
}

// Each --compare-checkpoint as a scheme after the named ones (and their rounding variants):
// opened, checked against the parent, with statistics under --stats-for all. Returns each
// artifact with its index among the schemes.
std::vector<std::pair<std::size_t, ArtifactScheme>> add_artifacts(const EvalArgs& a, const EvalInputs& inputs,
                                                                  const SchemeOptions& options, PreparedSchemes& prepared) {
  std::vector<std::pair<std::size_t, ArtifactScheme>> artifacts;
  const std::optional<std::string> data_dir = a.data.data_dir.empty() ? std::nullopt : std::optional(a.data.data_dir);
  for (const std::string& given : a.compare_checkpoints) {
    const std::filesystem::path path = resolve_model_path(given, data_dir);
    ArtifactScheme artifact = artifact_scheme(path, *inputs.model, a.artifact_weights_only);
    for (const EvalScheme& earlier : prepared.schemes)
      QEVAL_CHECK(earlier.name != artifact.scheme.name,
                  "--compare-checkpoint {}: its row would be named '{}', as {} is; rename the folder (a row is named "
                  "by the artifact's folder and method)", given, artifact.scheme.name,
                  earlier.own_checkpoint ? "another artifact's" : "a scheme");
    std::shared_ptr<StatisticsCollector> stats;
    if (options.stats_for == StatsFor::all) stats = attach_statistics(artifact.scheme, inputs.model->config(), options.statistics);
    prepared.statistics.push_back(stats);
    prepared.rewrites.push_back(nullptr);
    prepared.schemes.push_back(artifact.scheme);
    artifacts.emplace_back(prepared.schemes.size() - 1, std::move(artifact));
  }
  return artifacts;
}

void run_eval(const EvalArgs& a) {
  check_options_take_effect(a);
  if (wants_series(a.series, a.data.model)) {  // each checkpoint evaluated by this function, as if alone
    QEVAL_CHECK(a.compare_checkpoints.empty(),
                "--compare-checkpoint {}: an artifact is compared with the one model it was made from, and --model {} "
                "is a series of checkpoints; evaluate the step it was made from alone", a.compare_checkpoints.front(),
                a.data.model);
    QEVAL_CHECK(a.shard.empty() && a.plots.empty() && a.state_file.empty(),
                "--model {} is a series of checkpoints: --shard, --plots and --state-file take one checkpoint", a.data.model);
    // S.json and its folder S/ go beside the series, never inside it (a watched trainer writes there).
    check_output_is_not_an_input(a.out, "--out", {{"series", a.data.model}, {"--protocol file", a.data.protocol},
                                                  {"data file", a.data.data}, {"--tokenizer", a.data.tokenizer}});
    return run_series(a.series, a.data.model, a.out, [&a](const SeriesJob& job) {
      EvalArgs one = a;
      one.series.mode = "off";
      one.series.watch = false;
      one.data.model = job.model;
      one.out = job.record;
      one.resume = true;
      one.state_file = job.state;
      one.series_stamp = job.stamp;
      run_eval(one);
      return exit_status;
    }, [&a](const std::string& model) { return checkpoint_inputs(a, model); });
  }
  // The record's timings cover this process from here to the record (a resumed run's earlier
  // processes are not in them); the phases add up to total_s.
  const PhaseTimes phases_at_start = thread_phase_times();
  const Shard shard = parse_shard(a.shard);
  QEVAL_CHECK(!a.resume || !a.out.empty() || !a.state_file.empty(), "--resume needs --out (or --state-file)");
  const std::string state_path = !a.state_file.empty() ? a.state_file : (a.out.empty() ? "" : a.out + ".state.json");
  // Fail before hours of work, not after, when a result cannot be written.
  if (!a.out.empty()) check_output_file(a.out, "--out");
  if (!state_path.empty() && (a.resume || a.stop_after > 0)) check_output_file(state_path, "--state-file");
  if (!a.plots.empty()) check_output_folder(a.plots, "--plots");
  EvalInputs inputs = prepare_eval_inputs(a.data);
  if (!a.calibration_data.empty()) {
    inputs.calibration_path =
        resolve_input_path(a.calibration_data, a.data.data_dir.empty() ? std::nullopt : std::optional(a.data.data_dir));
    // Checked here, before the schemes: the calibration pass hashes the file first (a device such as
    // /dev/zero would never end) and would name it only as "cannot open".
    std::error_code ec;
    QEVAL_CHECK(std::filesystem::exists(inputs.calibration_path, ec), "--calibration-data {}: no such file",
                a.calibration_data);
    QEVAL_CHECK(std::filesystem::is_regular_file(inputs.calibration_path, ec),
                "--calibration-data {}: not a regular file ({}); expected a text, JSON lines, compressed or token file",
                a.calibration_data, std::filesystem::is_directory(inputs.calibration_path, ec) ? "a folder" : "a device or other special file");
  }
  QEVAL_CHECK(a.calibration_seq_len != 1, "--calibration-seq-len 1: a window needs at least 2 tokens (an input and its "
              "target); expected 0 (--seq-len) or at least 2");
  inputs.calibration_seq_len = a.calibration_seq_len;
  if (inputs.model->config().position == PositionKind::learned)
    QEVAL_CHECK(a.calibration_seq_len <= inputs.model->config().max_seq_len,
                "--calibration-seq-len {} exceeds the {} learned positions of {}", a.calibration_seq_len,
                inputs.model->config().max_seq_len, inputs.model_path.string());
  // Every file this run writes, by its real name, apart from every file and folder it reads.
  std::vector<RolePath> outputs = {{"--out", a.out}};
  if (a.resume || a.stop_after > 0) outputs.push_back({"--state-file", state_path});
  if (!a.plots.empty()) {
    check_not_in_checkpoint(a.plots, "--plots", inputs.model_path);
    outputs.push_back({"--plots", std::filesystem::path(a.plots) / "figure_data.json"});
    for (const RolePath& f : figure_files(a.plots, {"attention_map", "hidden_abs", "layer_curves"}, "--plots"))
      outputs.push_back(f);
  }
  std::vector<RolePath> reads = eval_reads(a, inputs);
  check_outputs_apart(outputs, reads);
  SchemeOptions scheme_options;
  scheme_options.stats_for = parse_stats_for(a.stats_for);
  scheme_options.statistics.attention = !a.no_attention_stats;
  scheme_options.statistics.sink_T = a.sink_T;
  scheme_options.statistics.sink_eps = a.sink_eps;
  scheme_options.statistics.mamba_channels = a.mamba_channels;
  scheme_options.quantize_lm_head = a.quantize_lm_head;
  scheme_options.quantize_ssm_inner = a.quantize_ssm_inner;
  scheme_options.calibration_windows = a.calibration_windows;
  if (!a.calibration_data.empty())
    scheme_options.calibration_options.push_back(fmt::format("--calibration-data {}", a.calibration_data));
  if (a.calibration_seq_len > 0)
    scheme_options.calibration_options.push_back(fmt::format("--calibration-seq-len {}", a.calibration_seq_len));
  scheme_options.imatrix = a.imatrix;
  scheme_options.placement = inputs.placement;
  scheme_options.rounding_band = a.rounding_band;
  scheme_options.rounding_eps = a.rounding_band_eps;
  scheme_options.rounding_seed = a.rounding_seed;
  scheme_options.window_length = inputs.protocol.seq_len;
  // Static activation scales are calibrated on windows the evaluation does not use, before it.
  StaticScaleCalibrator calibrator(
      *inputs.model, [&inputs](std::int64_t n) { return inputs.calibration_windows_from_data(n); }, inputs.placement,
      a.data.batch_size);
  scheme_options.calibrate = [&calibrator, &a](const SchemeSpec& spec) {
    if (!a.quiet)
      fmt::print(stderr, "scheme {}: calibrating static input scales ({} windows, {}) with a full-precision pass\n",
                 spec.name, spec.input_activations.calibration->windows,
                 spec.input_activations.calibration->statistic_name());
    PhaseScope calibration(Phase::transform, kNoScheme);
    return calibrator.scales_for(spec);
  };
  // GPTQ's and AWQ's weights are calibrated on windows the evaluation does not use, before it, layer by layer.
  WeightCalibrator weight_calibrator(
      *inputs.model, [&inputs](std::int64_t n) { return inputs.calibration_windows_from_data(n); }, a.data.batch_size);
  scheme_options.calibrate_weights = [&weight_calibrator, &a](const SchemeSpec& spec) {
    if (!a.quiet)
      fmt::print(stderr, "scheme {}: calibrating {} weights ({} calibration windows, layer by layer on {})\n", spec.name,
                 spec.weights.gptq ? "GPTQ" : "AWQ", spec.weights.calibration_windows(),
                 spec.weights.gptq ? "the scheme's own outputs" : "the folded layers' full-precision outputs");
    return weight_calibrator.weights_for(spec);
  };
  if (a.quantize_ssm_inner) {  // acts on Mamba layers' x_proj and dt_proj (quant/schemes/spec.h): none, nothing to do
    const std::vector<std::string> linears = model_linear_names(inputs.model->config());
    auto ends_with = [](const std::string& n, const std::string& suffix) {
      return n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    const bool inner = std::any_of(linears.begin(), linears.end(), [&](const std::string& n) {
      return ends_with(n, ".mamba.x_proj") || ends_with(n, ".mamba.dt_proj");
    });
    QEVAL_CHECK(inner, "--quantize-ssm-inner: quantises the x_proj and dt_proj of Mamba layers, and {} has no Mamba "
                "layer (none of its {} layers has such a linear); leave it out", inputs.model_path.string(),
                inputs.model->config().n_layers);
  }
  PreparedSchemes prepared = make_schemes(inputs.model->config(), parse_scheme_list(a.schemes), scheme_options);
  check_rounding_options(a, prepared, inputs.placement.dtype);
  QEVAL_CHECK(!a.artifact_weights_only || !a.compare_checkpoints.empty(),
              "--artifact-weights-only: evaluates the --compare-checkpoint artifacts on their weights alone, and none "
              "is given; leave it out");
  QEVAL_CHECK(a.compare_checkpoints.empty() || a.data.transforms.empty(),
              "--compare-checkpoint {}: compares an artifact with the model it was made from, and --transform {} "
              "changes that model's weights; leave one of them out", a.compare_checkpoints.front(), a.data.transforms.front());
  std::vector<std::pair<std::size_t, ArtifactScheme>> artifacts = add_artifacts(a, inputs, scheme_options, prepared);
  if (a.mamba_channels_given && !inputs.model->config().has_mixer(MixerKind::mamba))
    fmt::print(stderr, "note: --mamba-channels {} has nothing to choose from: {} has no Mamba (S6) layer\n",
               a.mamba_channels, inputs.model_path.string());
  if (a.rounding_band > 0 && !a.quiet) {
    const std::size_t variants = prepared.schemes.size() - parse_scheme_list(a.schemes).size();
    fmt::print(stderr,
               "rounding band: {} variant(s) of each quantised scheme, {} more forward passes in all (full precision is "
               "not repeated)\n",
               a.rounding_band, variants);
  }
  std::vector<EvalScheme>& schemes = prepared.schemes;
  std::shared_ptr<FigureDataObserver> figures;  // --plots: maps of the full-precision pass
  if (!a.plots.empty()) {
    find_gnuplot();  // fail before the evaluation, not after it
    figures = attach_figure_observer(schemes.front());
  }
  nlohmann::json plan_json;
  // A state file's identity holds the weights hash, so a run that may save one hashes first;
  // any other takes it from the evaluation's own reads (finish_weights_hash).
  const bool hash_from_reads = !a.resume && a.stop_after == 0;
  const PlanEstimate plan =
      plan_evaluation(inputs, a.data, schemes, prepared.rewrites, a.quiet, plan_json, hash_from_reads);

  WindowSource& windows = *inputs.windows;
  RecordContext& context = inputs.context;
  context.command = a.argv;
  context.options.update({{"stats_for", a.stats_for},
                          {"attention_statistics", !a.no_attention_stats},
                          {"quantize_lm_head", a.quantize_lm_head},
                          {"shard", a.shard.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.shard)}});
  if (a.quantize_ssm_inner) context.options["quantize_ssm_inner"] = true;
  if (a.calibration_windows > 0) context.options["calibration_windows"] = a.calibration_windows;
  if (!a.calibration_data.empty()) context.options["calibration_data"] = inputs.calibration_path.string();
  if (a.calibration_seq_len > 0) context.options["calibration_seq_len"] = a.calibration_seq_len;
  if (!a.imatrix.empty()) context.options["imatrix"] = a.imatrix;
  // A state's identity names each artifact's weights, as it names the model's.
  if (!hash_from_reads)
    for (auto& [index, artifact] : artifacts)
      schemes[index].description["artifact"]["weights_hash"] = artifact.reader->weights_hash();
  // What a saved state must match to be resumed: everything that decides the results.
  EvalResult empty;
  empty.schemes.resize(schemes.size());
  const nlohmann::json identity =
      evaluation_identity(build_record(context, scheme_infos(schemes, prepared.linear_weight_bytes()), empty, {}));
  EvalResult resumed;
  std::function<bool(std::int64_t)> in_shard;
  if (shard.count > 1) in_shard = [shard](std::int64_t w) { return w % shard.count == shard.index; };
  if (a.resume && std::filesystem::exists(state_path)) {
    resumed = load_resume_state(state_path, identity, prepared, inputs, in_shard);
    fmt::print(stderr, "resuming from {}: {} windows already done (each checked against the data)\n", state_path,
               resumed.windows);
  }

  EvalOptions options;
  options.batch_size = a.data.batch_size;
  options.progress = !a.quiet;
  options.expected_windows = windows.expected_windows();
  options.placement = inputs.placement;
  options.plan = plan.plan;
  // Every window the protocol gives passes through select_window, chosen or not: a shard record
  // says which windows there were, so merge can tell a complete set of shards from a partial one.
  ProtocolWindows protocol_windows;
  options.select_window = [&](std::int64_t w) {
    protocol_windows.add(w);
    return !in_shard || in_shard(w);
  };
  auto last_save = std::chrono::steady_clock::now();
  auto save_state = [&](const EvalResult& r) {
    write_file_atomic(state_path, nlohmann::json{{"identity", identity}, {"state", run_state_to_json(r, prepared.statistics, prepared.measures())}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    last_save = std::chrono::steady_clock::now();
  };
  if (a.resume || a.stop_after > 0) {
    options.after_batch = [&](const EvalResult& r) {
      bool stop = a.stop_after > 0 && r.windows >= a.stop_after;
      if (stop || std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save).count() >= a.checkpoint_seconds) {
        if (!state_path.empty()) save_state(r);
      }
      if (stop) throw StoppedEarly{r.windows};
    };
  }
  // Each quantised scheme's per-token KL and Δp, for exact percentiles: beside a shard's record
  // (merge reads them), beside a resumable run's state, else in a temporary folder.
  const bool resumable = a.resume || a.stop_after > 0;
  std::string values_folder;
  if (shard.count > 1 && !a.out.empty())
    values_folder = a.out + ".tokens";
  else if (resumable && !state_path.empty())
    values_folder = state_path + ".tokens";
  TokenValuesRun token_values(values_folder, !values_folder.empty(), schemes, resumed);
  EvalResult result;
  try {
    result = evaluate(*inputs.model, schemes, windows, options, std::move(resumed));
  } catch (const StoppedEarly& stopped) {
    fmt::print(stderr, "stopped after {} windows as asked (--stop-after); state in {}\n", stopped.windows, state_path);
    exit_status = 3;
    return;
  }
  token_values.finish(result);
  finish_weights_hash(inputs);
  finish_context(inputs);
  prepared.finish_descriptions();
  for (auto& [index, artifact] : artifacts)
    finish_artifact_description(artifact, *inputs.model, prepared.schemes[index].description, static_cast<int>(index));

  nlohmann::json record =
      build_record(context, scheme_infos(schemes, prepared.linear_weight_bytes()), result, prepared.statistics_summaries());
  attach_rounding_bands(record);
  if (!a.series_stamp.is_null()) record["series_step"] = a.series_stamp;
  record["plan"] = plan_json;
  record["plan"]["measured_peak_rss_bytes"] = peak_rss();
  if (!inputs.placement.on_cpu())
    record["plan"]["measured_peak_device_bytes"] = kernels::peak_allocated_bytes(inputs.placement.device);
  // Schemes that keep tokens in full precision (quant/schemes/spec.h keep_tokens) say which positions
  // they kept, over the windows of this record (a resumed run's earlier windows included, from its
  // state; a shard's own windows, which merge adds up).
  for (std::size_t i = 0; i < prepared.schemes.size(); ++i) {
    if (nlohmann::json kept = prepared.kept_positions_report(i); !kept.is_null()) record["schemes"][i]["kept_positions"] = kept;
    // LLM.int8()-style schemes: how many input features ran in float, per layer.
    // On a GPU: which int8 GEMM / 4-bit path the dispatch chose for the shapes this run saw.
    if (nlohmann::json engines = prepared.engines_used_report(i); !engines.is_null()) {
      record["schemes"][i]["kernels_used"] = engines;
      // --dtype fp64: every quantised linear ran QuantizedLinear's float64 reference maths.
      if (inputs.placement.dtype == at::kDouble) record["schemes"][i]["description"]["execution"] = "fp64 reference";
    }
    if (nlohmann::json outliers = prepared.outlier_features_report(i); !outliers.is_null())
      record["schemes"][i]["outlier_features"] = outliers;
  }
  if (shard.count > 1) {
    record["shard"] = {{"index", shard.index},
                       {"count", shard.count},
                       {"protocol_windows", protocol_windows.count},
                       {"state", run_state_to_json(result, prepared.statistics, prepared.measures())}};
    if (!protocol_windows.sequential) record["shard"]["protocol_window_indices"] = protocol_windows.indices;
  }

  std::vector<std::string> scheme_names;
  for (const auto& scheme : schemes) scheme_names.push_back(scheme.name);
  const PhaseTimes phases = thread_phase_times() - phases_at_start;
  record["timings"] = phases.to_json(scheme_names);
  if (!a.quiet) fmt::print(stderr, "time by phase, {}\n", phases.summary_line());

  std::string transformed;  // " after rotate, smooth:alpha=0.8"
  for (const auto& t : a.data.transforms) transformed += (transformed.empty() ? " after " : ", ") + t;
  fmt::print("{}{} on {} ({} windows of {} tokens, {} scored)\n\n", inputs.model_path.filename().string(), transformed,
             inputs.data_path.filename().string(), result.windows, inputs.protocol.seq_len, result.scored_tokens);
  fmt::print("{}\n{}", scheme_table_markdown(record), schemes.size() > 1 ? "\n" + penalty_row_markdown(record) : "");
  std::string stats = statistics_table_markdown(record);
  if (!stats.empty()) fmt::print("\n{}", stats);
  if (!a.out.empty()) {
    write_record(a.out, record);
    fmt::print(stderr, "record written to {}\n", a.out);
  }
  if (figures)
    for (const auto& png : render_eval_plots(record, figures->to_json(), a.plots, parse_colour_scale(a.plots_colour_scale))) fmt::print(stderr, "picture written to {}\n", png.string());
  if (a.resume && !state_path.empty()) {
    std::filesystem::remove(state_path);
    if (shard.count <= 1) token_values.remove();
  }
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "perplexity per scheme against full precision, with statistics");
  add_json_config(cmd);
  add_eval_data_options(cmd, args->data);
  cmd->add_option("--schemes,-s", args->schemes, "comma-separated scheme presets or JSON spec files; full precision always runs first")
      ->capture_default_str();
  cmd->add_option("--stats-for", args->stats_for, "which schemes collect outlier/attention statistics: none, full, all")
      ->capture_default_str()->check(CLI::IsMember({"none", "full", "all"}));
  cmd->add_flag("--no-attention-stats", args->no_attention_stats, "skip attention statistics (hidden-state ones only)");
  cmd->add_option("--sink-T", args->sink_T, "Sink₁^ε: first T queries")->capture_default_str()->check(integer_in(1, 1 << 20));
  cmd->add_option("--mamba-channels", args->mamba_channels,
                  "Mamba (S6) layers: measure the implicit attention on this many evenly spaced d_inner channels (0: all; "
                  "each channel is a head of L x L, so all 1,536 of mamba-130m's cost about 160 forwards at 2,048 tokens)")
      ->capture_default_str()->check(integer_in(0, 1 << 20))
      ->each([args](const std::string&) { args->mamba_channels_given = true; });
  cmd->add_option("--sink-eps", args->sink_eps, "Sink₁^ε: threshold ε on the mean attention to key 1, in (0, 1)")->capture_default_str()->check(number_in(0, 1, true, true));
  add_rounding_band_options(cmd, args->rounding_band, args->rounding_band_eps, "each quantised scheme");
  cmd->add_option("--rounding-seed", args->rounding_seed,
                  "evaluate every quantised scheme as its rounding variant of this seed (another valid implementation; "
                  "docs/rounding-band.md); 0: the default implementation")
      ->check(integer_in(0, 1 << 30));
  cmd->add_flag("--quantize-lm-head", args->quantize_lm_head, "quantise the LM head too (every scheme)");
  cmd->add_option("--calibration-windows", args->calibration_windows,
                  "calibration windows of every calibrated scheme (GPTQ's and AWQ's weights, static activation scales), "
                  "overriding each spec's: the windows of the data after the evaluated ones, never evaluated "
                  "(docs/calibrated.md); 0: each spec's own")
      ->check(integer_in(0, 1 << 20));
  cmd->add_option("--calibration-data", args->calibration_data,
                  "the text (or token file) every calibrated scheme calibrates on, read like --data with the same "
                  "tokenizer, separator and BOS rule; default: the evaluation data's windows after the evaluated ones. "
                  "Windows of the evaluation data itself (or a copy) that overlap an evaluated one are never used")
      ->check(CLI::Validator(
          [](std::string& s) { return s.empty() ? std::string("expected a file, found an empty path") : std::string(); },
          "FILE"));
  cmd->add_option("--calibration-seq-len", args->calibration_seq_len,
                  "the length of every calibrated scheme's calibration windows, in tokens; 0: --seq-len")
      ->check(integer_in(0, 1 << 20));
  cmd->add_option("--imatrix", args->imatrix,
                  "llama.cpp's importance matrix (GGUF or legacy .dat, from llama-imatrix or qeval imatrix) for every "
                  "scheme of kind ggml (gguf-*), each tensor quantised with its entry as llama-quantize --imatrix does");
  cmd->add_option("--compare-checkpoint", args->compare_checkpoints,
                  "a quantised checkpoint made from --model (a GPTQ, AWQ, compressed-tensors, bitsandbytes or FP8 "
                  "folder, a quantised GGUF): evaluated beside it as a row named by its folder and method, with its "
                  "weight error against --model per tensor (docs/quantized-checkpoints.md); repeatable")
      ->check(CLI::Validator(
          [](std::string& s) { return s.empty() ? std::string("expected a checkpoint, found an empty path") : std::string(); },
          "PATH"));
  cmd->add_flag("--artifact-weights-only", args->artifact_weights_only,
                "evaluate every --compare-checkpoint on its weights alone, without the input activation quantisation "
                "its config declares (by default that runs through qeval's own quantisers)");
  cmd->add_flag("--quantize-ssm-inner", args->quantize_ssm_inner,
                "quantise Mamba's x_proj and dt_proj too (every scheme; by default they stay full precision)");
  cmd->add_option("--out,-o", args->out, "write the result record (JSON) here, atomically")->check(output_path());
  cmd->add_flag("--quiet,-q", args->quiet, "no progress on stderr");
  cmd->add_option("--plots", args->plots, "also draw PNG pictures (gnuplot): attention and |hidden state| maps and per-layer curves of full precision, into this folder");
  cmd->add_option("--plots-colour-scale", args->plots_colour_scale, "--plots maps: linear or log colour scale")
      ->capture_default_str()->check(CLI::IsMember({"linear", "log"}));
  cmd->add_option("--shard", args->shard, "evaluate only windows with index % n == i (\"i/n\"); combine with qeval merge");
  cmd->add_flag("--resume", args->resume, "save progress to a state file as it goes, and continue from it when present");
  cmd->add_option("--state-file", args->state_file, "state file for --resume (default: <out>.state.json)");
  cmd->add_option("--checkpoint-seconds", args->checkpoint_seconds, "with --resume: seconds between state saves")
      ->capture_default_str()->check(number_in(0, 1e9));
  add_series_options(cmd, args->series);
  cmd->add_option("--stop-after", args->stop_after, "stop (exit 3) after this many windows, saving state (for testing --resume)")
      ->check(integer_in(0))->group("");
  cmd->callback([args, cmd] {
    args->argv = command_line;
    for (const char* option : {"--sink-T", "--sink-eps", "--plots-colour-scale"})
      if (cmd->count(option) > 0) args->given.insert(option);
    run_eval(*args);
  });
}

}  // namespace qeval::cli
