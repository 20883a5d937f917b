// `qeval plot RECORD... --out DIR`: per-layer curves from a record's statistics (several records:
// on shared axes), the entropy by layer (SAMBA Fig. 5; by scheme for one record), the penalties
// with their rounding bands (records evaluated with --rounding-band), and the attention and
// hidden-state maps from figure data written by `qeval eval --plots` (--figure-data, one record).
#include <fmt/core.h>

#include <algorithm>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "cli/json_config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/output_paths.h"
#include "reports/compare.h"
#include "reports/plot.h"
#include "records/record.h"
#include "records/record_verify.h"
#include "records/series_record.h"
#include "reports/series_views.h"

namespace qeval::cli {
namespace {

struct PlotArgs {
  std::vector<std::string> records;
  std::string out;
  std::string scheme = "full";
  std::string figure_data;
  std::string colour_scale = "linear";
  bool allow_partial = false;
  bool allow_protocol_mismatch = false;  // records / series: draw runs evaluated differently together
  std::string x = "tokens";              // series: the horizontal axis
};

void run_plot(const PlotArgs& a) {
  QEVAL_CHECK(!a.records.empty(), "plot: give one result record, or several to draw on shared axes");
  QEVAL_CHECK(!a.out.empty(), "plot: --out DIR is required");
  check_output_folder(a.out, "--out");
  // Every .dat, .gp, .png (and gnuplot's .log) plot may write, by its real name, apart from its inputs.
  std::vector<RolePath> read = {{"--figure-data file", a.figure_data}};
  for (const auto& r : a.records) read.push_back({"record", r});
  check_outputs_apart(figure_files(a.out,
                                   {"layer_curves", "entropy_by_layer", "entropy_by_scheme", "penalties", "attention_map",
                                    "hidden_abs", "trajectory"},
                                   "--out"),
                      read);
  QEVAL_CHECK(a.figure_data.empty() || a.records.size() == 1,
              "plot: --figure-data draws one model's maps; give one record with it, found {}", a.records.size());
  if (is_series_record_file(a.records.front())) find_gnuplot();  // before any file is written
  if (is_series_record_file(a.records.front())) {  // trajectories against tokens seen (reports/series_views.h)
    QEVAL_CHECK(a.figure_data.empty(), "plot: --figure-data draws one record's maps, not a series'");
    std::vector<LabeledSeries> runs;
    for (const auto& path : a.records) runs.push_back({path, read_verified_series_record(path), ""});
    prepare_series(runs, a.allow_protocol_mismatch);
    for (const auto& p : plot_series(runs, a.out, parse_series_axis(a.x))) fmt::print("{}\n", p.string());
    return;
  }
  std::vector<nlohmann::json> records;
  std::vector<LabeledRecord> labeled;
  for (const auto& path : a.records) {
    records.push_back(read_record(path));
    // Verified, not trusted (records/record_verify.h): a shard or partial merge only with --allow-partial.
    for (const auto& note : require_verified_record(records.back(), path, a.allow_partial))
      fmt::print(stderr, "WARNING: {}\n", note);
    labeled.push_back({path, records.back(), "", {}});
    // Pictures never go into the checkpoint folder the record was evaluated from.
    const nlohmann::json& model = records.back().at("model");
    if (model.contains("path") && model["path"].is_string()) check_not_in_checkpoint(a.out, "--out", model["path"].get<std::string>());
  }
  // Curves on shared axes must measure the same thing, as compare and check require.
  if (!a.allow_protocol_mismatch) require_same_protocol(labeled);
  for (std::size_t i = 1; i < records.size(); ++i)
    if (comparison_identity(records[i]) != comparison_identity(records.front()) ||
        !scheme_definition_differences(records.front(), records[i]).empty()) {
      records[i]["plot_mark"] = "[other protocol]";
      fmt::print(stderr, "WARNING: {} was evaluated under a different protocol, data or scheme definition than {} "
                 "(--allow-protocol-mismatch); its curves are marked\n", a.records[i], a.records.front());
    }
  find_gnuplot();  // before any file is written
  const nlohmann::json& record = records.front();
  // Records with a rounding band (eval --rounding-band) also get penalties.png: ΔNLL ± se ± band.
  // Their per-layer curves need statistics; without them only the penalties are drawn.
  const bool bands = std::any_of(records.begin(), records.end(), has_rounding_band);
  const bool statistics = std::all_of(records.begin(), records.end(), [&](const nlohmann::json& r) {
    for (const auto& s : r.at("schemes"))
      if (s.value("name", "") == a.scheme && s.contains("statistics") && s["statistics"].is_object()) return true;
    return false;
  });
  // Records with per-token KL percentiles or position buckets: kl_cdf.png, position_buckets.png.
  const bool tails = has_token_tails(records);
  std::vector<std::filesystem::path> images;
  if ((!bands && !tails) || statistics)
    images = plot_layer_curves(records, a.out, a.scheme);
  else
    fmt::print(stderr, "note: scheme '{}' has no statistics in every record: per-layer curves not drawn\n", a.scheme);
  // Per-layer entropies (SAMBA Fig. 5): attention / implicit attention and selection by layer.
  if (has_layer_entropies(records, a.scheme)) {
    auto entropies = plot_layer_entropies(records, a.out, a.scheme);
    images.insert(images.end(), entropies.begin(), entropies.end());
  }
  if (bands) images.push_back(plot_penalties(records, a.out));
  if (tails) {
    auto pictures = plot_token_tails(records, a.out);
    images.insert(images.end(), pictures.begin(), pictures.end());
  }
  if (!a.figure_data.empty()) {
    nlohmann::json fd;
    try {
      fd = nlohmann::json::parse(read_file(a.figure_data));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: figure data is not valid JSON: {}", a.figure_data, e.what());
    }
    std::vector<std::filesystem::path> maps;
    try {
      maps = plot_figure_maps(fd, a.out, record_model_name(record), parse_colour_scale(a.colour_scale));
    } catch (const Error& e) {
      fail("--figure-data {}: {}", a.figure_data, e.what());  // which file the key path is in
    }
    images.insert(images.end(), maps.begin(), maps.end());
  }
  for (const auto& p : images) fmt::print("{}\n", p.string());
}

}  // namespace

void add_plot_command(CLI::App& app) {
  auto args = std::make_shared<PlotArgs>();
  auto* cmd = app.add_subcommand("plot", "PNG pictures (gnuplot) of records' per-layer statistics and eval --plots maps");
  add_json_config(cmd);
  cmd->add_option("record", args->records, "result record (qeval eval --out); several: their curves on shared axes");
  cmd->add_option("--out,-o", args->out, "folder for the .dat, .gp and .png files")->check(output_path());
  cmd->add_option("--scheme", args->scheme, "scheme whose statistics to draw")->capture_default_str();
  cmd->add_option("--figure-data", args->figure_data, "figure_data.json written by qeval eval --plots DIR: also draw the maps");
  cmd->add_option("--colour-scale", args->colour_scale, "maps: linear or log colour scale")
      ->capture_default_str()->check(CLI::IsMember({"linear", "log"}));
  cmd->add_flag("--allow-partial", args->allow_partial, "draw shard records and partial merges too (marked \"(partial)\")");
  cmd->add_flag("--allow-protocol-mismatch", args->allow_protocol_mismatch,
                "draw records (or series) of different protocols, data or scheme definitions on shared axes (marked)");
  cmd->add_option("--x", args->x, "series records: horizontal axis (log): tokens (seen; step where unknown), step, or "
                  "progress (step / the run's total steps)")
      ->capture_default_str()->check(CLI::IsMember({"tokens", "step", "progress"}));
  cmd->callback([args] { run_plot(*args); });
}

}  // namespace qeval::cli
