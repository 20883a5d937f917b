#include "reports/sensitivity_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/printable.h"
#include "common/error.h"
#include "common/files.h"
#include "reports/plot.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

double get_or_nan(const json& j) { return j.is_number() ? j.get<double>() : std::numeric_limits<double>::quiet_NaN(); }

std::string fixed(const json& j, int digits) {
  return j.is_number() ? fmt::format("{:.{}f}", j.get<double>(), digits) : std::string("—");
}

// The title line shared by the table and the plot.
std::string title_of(const json& record) {
  const json& s = record.at("sensitivity");
  std::string data = "data";
  if (record.contains("data") && record["data"].contains("path") && record["data"]["path"].is_string())
    data = fs::path(record["data"]["path"].get<std::string>()).filename().string();
  const json protocol = record.value("protocol", json::object());
  return fmt::format("{} on {}: {} windows of {} tokens ({} scored); {} applied to one {} at a time",
                     record_model_name(record), data, protocol.value("windows", json(0)).dump(),
                     protocol.value("seq_len", json(0)).dump(), protocol.value("scored_tokens", json(0)).dump(),
                     s.at("scheme").get<std::string>(), s.at("by").get<std::string>() == "kind" ? "layer kind" : "layer");
}

}  // namespace

std::string sensitivity_table_markdown(const json& record, std::int64_t top) {
  const json& s = record.at("sensitivity");
  bool with_band = false;  // sensitivity --rounding-band: each unit's ΔNLL also ± its rounding band
  for (const auto& u : s.at("units")) with_band = with_band || u.contains("rounding_band");
  std::string out = title_of(record) + "\n\n";
  out += fmt::format("| rank | unit | ΔNLL ± se{} | ΔPPL % | first-token share of ΔNLL | input kurtosis first / rest | "
                     "max\\|x\\| first / rest | ‖x‖∞/‖x‖₂ rest | largest-ΔNLL positions |\n"
                     "|---:|---|---:|---:|---:|---:|---:|---:|---|\n",
                     with_band ? " ± band" : "");
  std::int64_t shown = 0, chaotic = 0;
  json variants;  // K, from the units' bands
  for (const auto& u : s.at("units")) {
    std::string band;
    if (u.contains("rounding_band")) {
      variants = u.at("rounding_band").at("variants");
      const double sd = get_or_nan(u.at("rounding_band").at("delta_nll_sd"));
      const bool exceeds = sd > get_or_nan(u.at("dnll_se"));
      chaotic += exceeds ? 1 : 0;
      band = fmt::format(" ± {:.5f}{}", sd, exceeds ? " ⚠" : "");
    }
    if (top > 0 && shown == top) continue;  // counted above, not shown
    ++shown;
    const json& in = u.at("inputs");
    const json& share = u.at("tokens").at("first_share");
    std::vector<std::string> positions;
    for (const auto& p : u.at("tokens").at("top_positions")) positions.push_back(p.at("position").dump());
    out += fmt::format("| {} | {} | {:+.5f} ± {:.5f}{} | {:+.2f} | {} | {} / {} | {} / {} | {} | {} |\n", u.at("rank").dump(),
                       markdown_cell(u.at("unit").get<std::string>()), get_or_nan(u.at("dnll_mean")), get_or_nan(u.at("dnll_se")), band,
                       100 * get_or_nan(u.at("dppl_rel")),
                       share.is_number() ? fmt::format("{:.1f}%", 100 * share.get<double>()) : std::string("—"),
                       fixed(in.at("kurtosis").at("first"), 2), fixed(in.at("kurtosis").at("rest"), 2),
                       fixed(in.at("max_abs").at("first"), 3), fixed(in.at("max_abs").at("rest"), 3),
                       fixed(in.at("inf_over_l2").at("rest"), 3), fmt::join(positions, ", "));
  }
  const auto total = static_cast<std::int64_t>(s.at("units").size());
  if (shown < total) out += fmt::format("\n({} of {} units shown; --top 0 shows all)\n", shown, total);
  if (total > 0) {
    // What the share would be if the penalty were spread evenly over the scored tokens.
    const json& tokens = s.at("units").at(0).at("tokens");
    const double first = get_or_nan(tokens.at("first").at("tokens")), rest = get_or_nan(tokens.at("rest").at("tokens"));
    out += fmt::format("\nFirst-token share: the part of the unit's total ΔNLL on the first scored token of each window "
                       "({} of {} scored tokens, so {:.2f}% when spread evenly; — when the total is not positive). "
                       "Positions: index of the target token in its window, largest mean ΔNLL first.\n",
                       tokens.at("first").at("tokens").dump(), fmt::format("{:.0f}", first + rest),
                       100 * first / (first + rest));
  }
  if (with_band)
    out += fmt::format("\nband: the standard deviation of the unit's ΔNLL over it and its {} rounding variants (inputs of its "
                       "quantised linears moved by a few ulps; docs/rounding-band.md). {} of {} units have a band above "
                       "their se{}.\n",
                       variants.dump(), chaotic, total,
                       chaotic > 0 ? " (⚠): their rounding is chaotic; compare each with its input max |x|" : "");
  return out;
}

fs::path plot_sensitivity(const json& record, const fs::path& png) {
  const json& s = record.at("sensitivity");
  QEVAL_CHECK(png.extension() == ".png", "--plot {}: the picture's name must end in .png", png.string());
  find_gnuplot();  // fail before writing anything
  const fs::path dir = png.has_parent_path() ? png.parent_path() : fs::path(".");
  QEVAL_CHECK(fs::is_directory(dir), "--plot {}: folder {} does not exist", png.string(), dir.string());
  const std::string stem = png.stem().string();
  const auto& units = s.at("units");
  const std::size_t n = units.size();
  auto num = [](const json& v) { return v.is_number() ? fmt::format("{:.9g}", v.get<double>()) : std::string("NaN"); };
  // A unit's name is one column of the data file (the x tic): no line end, blank or quote in it.
  auto data_word = [](const std::string& name) {
    std::string word = gnuplot_text(name);
    for (char& c : word)
      if (c == ' ' || c == '"' || c == '#') c = '_';
    return word.empty() ? std::string("_") : word;
  };
  std::string dat = "# qeval sensitivity: " + gnuplot_text(title_of(record)) +
                    "\n# rank unit dnll_mean dnll_se input_max_abs_first input_max_abs_rest rounding_band_sd\n";
  bool with_band = false;
  for (const auto& u : units) {
    const json band = u.contains("rounding_band") ? u.at("rounding_band").at("delta_nll_sd") : json(nullptr);
    with_band = with_band || band.is_number();
    dat += fmt::format("{} {} {} {} {} {} {}\n", u.at("rank").dump(), data_word(u.at("unit").get<std::string>()),
                       num(u.at("dnll_mean")), num(u.at("dnll_se")), num(u.at("inputs").at("max_abs").at("first")),
                       num(u.at("inputs").at("max_abs").at("rest")), num(band));
  }
  write_file_atomic(dir / (stem + ".dat"), dat);

  const std::size_t width = std::clamp<std::size_t>(160 + 34 * n, 900, 8000);
  std::string gp = "# qeval sensitivity: ΔNLL per unit (bars, left axis), input max |x| (points, right axis)\n";
  gp += fmt::format("set terminal pngcairo size {},620 noenhanced font 'sans,10'\nset output {}\n", width,
                    gnuplot_quote(stem + ".png"));
  gp += fmt::format("set title {}\n", gnuplot_quote(title_of(record)));
  gp += fmt::format("set xrange [0.4:{}.6]\n", n);
  gp += "set style fill solid 0.75 border -1\nset boxwidth 0.7\nset grid ytics\n"
        "set xtics rotate by -50 scale 0 font ',9'\nset bmargin 8\nset key top right opaque\n"
        "set ylabel 'ΔNLL vs full precision (nats per token)'\n"
        "set y2label 'input max |x| (mean over sequences, log scale)'\nset y2tics\nset logscale y2\nset ytics nomirror\n";
  // With rounding bands: a second, thicker error bar (orange), offset to the bar's right edge.
  gp += fmt::format("plot {0} using 1:3:xtic(2) with boxes lc rgb '#c0392b' title 'ΔNLL', "
                    "'' using 1:3:4 with yerrorbars lc rgb '#000000' pt -1 title '± se (sampling)', {1}"
                    "'' using 1:5 axes x1y2 with points pt 7 ps 1.1 lc rgb '#2e86c1' title 'max |x|, first position', "
                    "'' using 1:6 axes x1y2 with points pt 5 ps 0.9 lc rgb '#27ae60' title 'max |x|, other positions'\n",
                    gnuplot_quote(stem + ".dat"),
                    with_band ? "'' using ($1+0.25):3:7 with yerrorbars lc rgb '#e67e22' lw 2 pt 7 ps 0.4 title '± band (rounding)', "
                              : "");
  write_file_atomic(dir / (stem + ".gp"), gp);

  return render_gnuplot(dir, stem);
}

}  // namespace qeval
