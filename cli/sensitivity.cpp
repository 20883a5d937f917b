// `qeval sensitivity`: a scheme applied to one linear layer, or one layer kind across all blocks,
// at a time (eval/sensitivity.h); the ΔNLL of each beside its layers' input statistics, sorted
// by harm, as a Markdown table on stdout, a record with --out and a bar chart with --plot.
// Model, data and protocol options are eval's (cli/eval_setup.h).
#include <fmt/core.h>

#include <filesystem>

#include "cli/commands.h"
#include "cli/eval_setup.h"
#include "cli/json_config.h"
#include "cli/option_checks.h"
#include "common/error.h"
#include "common/files.h"
#include "eval/calibration_pass.h"
#include "quant/schemes/presets.h"
#include "reports/plot.h"
#include "records/record.h"
#include "records/rounding_band.h"
#include "eval/schemes.h"
#include "eval/rounding_band.h"
#include "eval/sensitivity.h"
#include "quant/calibration/static_scales.h"
#include "common/phases.h"
#include "model/block.h"
#include "reports/sensitivity_report.h"
#include "quant/schemes/spec.h"

namespace qeval::cli {
namespace {

struct SensitivityArgs {
  EvalDataArgs data;  // model, tokenizer, data, protocol, batch size, threads
  std::string scheme = "int8-moderate";
  std::string by = "layer";
  bool quantize_lm_head = false;
  std::string out;
  std::string plot;
  std::int64_t top = 20;
  std::int64_t rounding_band = 0;  // K rounding variants per unit (eval/sensitivity.h)
  double rounding_band_eps = 0;    // 0: the default
  bool quiet = false;
  std::vector<std::string> argv;
};

void run_sensitivity_command(const SensitivityArgs& a) {
  // Everything that can be refused is refused before the model is loaded or a window is read.
  const SensitivityGrouping by = parse_sensitivity_grouping(a.by);
  if (!a.out.empty()) check_output_file(a.out, "--out");
  if (!a.plot.empty()) {
    QEVAL_CHECK(std::filesystem::path(a.plot).extension() == ".png", "--plot {}: the picture's name must end in .png",
                a.plot);
    check_output_file(a.plot, "--plot");
    find_gnuplot();
  }
  SchemeSpec base = resolve_scheme(a.scheme);
  // GPTQ and AWQ calibrate every layer's weights in one pass over the calibration windows, layer after
  // layer (eval/weight_calibration_pass.h); sensitivity's runs, one unit quantised at a time, make no such pass.
  QEVAL_CHECK(!base.needs_weight_calibration(),
              "--scheme {}: its weights are calibrated with {}, which sensitivity does not do (one unit quantised at "
              "a time); evaluate the scheme with qeval eval, or give a round-to-nearest scheme",
              a.scheme, base.weights.gptq ? "GPTQ" : "AWQ");
  if (a.quantize_lm_head) base.quantize_lm_head = true;
  // Issue 63: an ε without a band changes nothing; one that moves no input would measure a band of 0.
  QEVAL_CHECK(a.rounding_band_eps == 0 || a.rounding_band > 0,
              "--rounding-band-eps {}: sizes the input jitter of --rounding-band, which is not given; add "
              "--rounding-band K or leave it out", a.rounding_band_eps);

  EvalInputs inputs = prepare_eval_inputs(a.data);
  if (a.rounding_band > 0)
    check_rounding_eps(a.rounding_band_eps > 0 ? a.rounding_band_eps : kDefaultRoundingEps, inputs.placement.dtype);
  if (base.needs_calibration()) {  // a static input scale, calibrated once for every unit
    PhaseScope calibration(Phase::transform, kNoScheme);
    StaticScaleCalibrator calibrator(
        *inputs.model, [&inputs](std::int64_t n) { return inputs.calibration_windows_from_data(n); }, inputs.placement,
        a.data.batch_size);
    base.calibrated = calibrator.scales_for(base);
  }
  // The record, and the picture with its .dat, .gp and gnuplot's .log beside it, apart from every input.
  std::vector<RolePath> outputs = {{"--out", a.out}};
  if (!a.plot.empty()) {
    const std::filesystem::path png(a.plot);
    for (const RolePath& f : figure_files(png.parent_path(), {png.stem().string()}, "--plot")) outputs.push_back(f);
    check_not_in_checkpoint(png.has_parent_path() ? png.parent_path() : ".", "--plot", inputs.model_path);
  }
  check_outputs_apart(outputs, eval_read_paths(a.data, inputs, a.scheme));
  const std::size_t unit_count = sensitivity_units(inputs.model->config(), base, by).size();  // must select something
  if (a.rounding_band > 0 && !a.quiet)
    fmt::print(stderr,
               "rounding band: {} variant(s) of each of the {} units, {} more forward passes in all (full precision is not "
               "repeated)\n",
               a.rounding_band, unit_count, static_cast<std::int64_t>(unit_count) * a.rounding_band);

  SensitivityOptions options;
  options.by = by;
  options.batch_size = a.data.batch_size;
  options.progress = !a.quiet;
  options.expected_windows = inputs.windows->expected_windows();
  options.placement = inputs.placement;
  options.rounding_band = a.rounding_band;
  options.rounding_eps = a.rounding_band_eps;
  nlohmann::json plan_json;
  options.plan = [&](const std::vector<EvalScheme>& schemes, const std::vector<std::shared_ptr<SchemeRewrite>>& rewrites) {
    return plan_evaluation(inputs, a.data, schemes, rewrites, a.quiet, plan_json, /*hash_from_reads=*/true).plan;
  };
  SensitivityRun run = run_sensitivity(*inputs.model, base, *inputs.windows, options);
  finish_weights_hash(inputs);
  finish_context(inputs);

  RecordContext& context = inputs.context;
  context.command = a.argv;
  context.options.update({{"quantize_lm_head", a.quantize_lm_head},
                          {"sensitivity", {{"scheme", a.scheme}, {"by", to_string(by)}}}});
  if (base.needs_calibration())
    context.options["sensitivity"]["static_scales"] =
        static_scales_description(base, model_linear_names(inputs.model->config()));
  if (a.rounding_band > 0) {
    context.options["sensitivity"]["rounding_band"] = a.rounding_band;
    context.options["sensitivity"]["rounding_band_eps"] = a.rounding_band_eps > 0 ? a.rounding_band_eps : kDefaultRoundingEps;
  }
  std::vector<std::int64_t> bytes;
  for (const auto& scheme : run.schemes)
    bytes.push_back(scheme.description.value("model_linear_bytes", full_linear_weight_bytes(inputs.model->config())));
  nlohmann::json record = build_record(context, scheme_infos(run.schemes, bytes), run.result, {});
  record["plan"] = plan_json;
  record["sensitivity"] = run.to_json();
  if (a.rounding_band > 0) {
    attach_rounding_bands(record);
    // Each unit's band, from its variants' entries as every report computes it.
    for (nlohmann::json& unit : record["sensitivity"]["units"])
      if (const std::optional<RoundingBand> band = rounding_band(record, unit.at("scheme").get<std::string>()))
        unit["rounding_band"] = band->to_json();
  }

  fmt::print("{}", sensitivity_table_markdown(record, a.top));
  if (!a.out.empty()) {
    write_record(a.out, record);
    fmt::print(stderr, "record written to {}\n", a.out);
  }
  if (!a.plot.empty()) fmt::print(stderr, "picture written to {}\n", plot_sensitivity(record, a.plot).string());
}

}  // namespace

void add_sensitivity_command(CLI::App& app) {
  auto args = std::make_shared<SensitivityArgs>();
  auto* cmd = app.add_subcommand(
      "sensitivity", "per-layer sensitivity: a scheme on one layer (or one layer kind) at a time, ΔNLL beside input statistics");
  add_json_config(cmd);
  add_eval_data_options(cmd, args->data);
  cmd->add_option("--scheme,-s", args->scheme, "scheme preset or JSON spec file to apply one unit at a time")
      ->capture_default_str();
  cmd->add_option("--by", args->by, "unit: layer (each linear the scheme selects) or kind (e.g. mlp.down across all blocks)")
      ->capture_default_str()->check(CLI::IsMember({"layer", "kind"}));
  cmd->add_flag("--quantize-lm-head", args->quantize_lm_head, "let the scheme select the LM head too");
  cmd->add_option("--top", args->top, "rows in the printed table (0: all)")->capture_default_str()->check(integer_in(0));
  cmd->add_option("--out,-o", args->out, "write the result record (JSON, with a \"sensitivity\" section) here, atomically")->check(output_path());
  cmd->add_option("--plot", args->plot, "also draw a bar chart of ΔNLL per unit with the input max |x| (gnuplot) to this .png");
  add_rounding_band_options(cmd, args->rounding_band, args->rounding_band_eps, "each unit");
  cmd->add_flag("--quiet,-q", args->quiet, "no progress on stderr");
  cmd->callback([args] {
    args->argv = command_line;
    run_sensitivity_command(*args);
  });
}

}  // namespace qeval::cli
