// entropy_by_layer.png and entropy_by_scheme.png (reports/plot.h): SAMBA's Figure 5 (Ren et al.
// 2024) from records' statistics. Panel (a) puts an attention layer's attention entropy and an SSM
// layer's implicit-attention entropy on one layer axis, so a hybrid's two mixer kinds compare;
// panel (b) is an SSM layer's selection entropy, below its uniform bound log(window).
//
// The data file has one row per layer and a column per kind. A layer of the other kind is '-'
// (gnuplot's "missing": the curve goes on to the next layer of its kind, so a hybrid's attention
// layers form one line); a layer of the column's kind without a value is NaN (a gap in the line).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "records/rounding_band.h"
#include "reports/layer_entropy.h"
#include "reports/plot.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct EntropyCurve {
  std::string label;  // a record's model name, or a scheme's name
  LayerEntropies e;
};

// A column's word for layer m: its value, NaN (its kind, no value) or '-' (another kind's layer).
std::string word(const LayerEntropies& e, const std::vector<double>& column, LayerKind kind, std::size_t m) {
  if (e.kind[m] != kind && e.kind[m] != LayerKind::unknown) return "-";
  return std::isfinite(column[m]) ? fmt::format("{:.9g}", column[m]) : std::string("NaN");
}

bool has_any(const std::vector<double>& column) {
  return std::any_of(column.begin(), column.end(), [](double x) { return std::isfinite(x); });
}

// Writes NAME.dat and NAME.gp for `curves` (one colour each) and renders NAME.png.
fs::path draw_entropies(const std::vector<EntropyCurve>& curves, const fs::path& dir, const std::string& name,
                        const std::string& what, const std::string& title) {
  std::string dat = "# per-layer entropies (nats) of " + gnuplot_text(what) +
                    " (qeval plot; layer is 1-based)\n"
                    "# attention: an attention layer's attention entropy; implicit: an SSM layer's implicit-attention "
                    "entropy; selection: an SSM layer's selection entropy\n"
                    "# '-': a layer of another kind (the curve goes on past it); NaN: no value (a gap)\n"
                    "# layer attention implicit selection\n";
  std::size_t layers = 0;
  bool panel_a = false, panel_b = false;
  std::set<double> bounds;  // selection.entropy_max of the curves with a selection entropy (NaN: none)
  bool unbounded = false;
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const LayerEntropies& e = curves[i].e;
    dat += fmt::format("{}# index {}: {}\n", i ? "\n\n" : "", i, gnuplot_text(curves[i].label));
    for (std::size_t m = 0; m < e.layers; ++m)
      dat += fmt::format("{} {} {} {}\n", m + 1, word(e, e.attention, LayerKind::attention, m),
                         word(e, e.implicit, LayerKind::ssm, m), word(e, e.selection, LayerKind::ssm, m));
    layers = std::max(layers, e.layers);
    panel_a = panel_a || has_any(e.attention) || has_any(e.implicit);
    if (has_any(e.selection)) {
      panel_b = true;
      if (std::isfinite(e.selection_max))
        bounds.insert(e.selection_max);
      else
        unbounded = true;
    }
  }
  write_file_atomic(dir / (name + ".dat"), dat);

  const bool single = curves.size() == 1;
  static constexpr const char* kColours[] = {"#c0392b", "#2e86c1", "#27ae60", "#8e44ad",
                                             "#d68910", "#17a589", "#7f8c8d", "#000000"};
  constexpr std::size_t kKeyRows = 8;
  const std::size_t key_rows = std::min(2 * curves.size(), kKeyRows);
  const int panels = (panel_a ? 1 : 0) + (panel_b ? 1 : 0);
  std::string gp = "# qeval plot: entropy by layer (SAMBA Fig. 5): attention / implicit attention, selection\n";
  gp += fmt::format("set terminal pngcairo size {},{} noenhanced font 'sans,10'\nset output {}\n",
                    panels == 2 ? 1500 : 800, 420 + 20 * key_rows, gnuplot_quote(name + ".png"));
  gp += fmt::format("set multiplot layout 1,{} title {}\n", panels, gnuplot_quote(title));
  gp += "set datafile missing '-'\n";  // another kind's layer: passed over, the line goes on
  gp += fmt::format("set xrange [0.5:{}.5]\nset yrange [0:*]\n", layers);
  gp += fmt::format("set grid\nset key below vertical maxrows {}\nset xlabel 'layer'\nset ylabel 'entropy (nats)'\n",
                    kKeyRows);
  gp += layers <= 40 ? "set xtics 1\n" : "set xtics autofreq\n";
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const char* colour = kColours[i % std::size(kColours)];
    gp += fmt::format("set style line {} lc rgb '{}' lw 2 dt 2 pt 6 ps 0.8\n", 2 * i + 1, colour);  // SSM: dashed, open
    gp += fmt::format("set style line {} lc rgb '{}' lw 2 pt 7 ps 0.8\n", 2 * i + 2, colour);        // solid, filled
  }
  const std::string file = gnuplot_quote(name + ".dat");
  auto item = [&](std::size_t i, int column, std::size_t style, const std::string& kind) {
    return fmt::format("{} index {} using 1:{} with linespoints ls {} title {}", file, i, column, style,
                       gnuplot_quote(single ? kind : curves[i].label + ": " + kind));
  };
  if (panel_a) {
    std::vector<std::string> items;
    for (std::size_t i = 0; i < curves.size(); ++i) {
      if (has_any(curves[i].e.attention)) items.push_back(item(i, 2, 2 * i + 2, "attention layers"));
      if (has_any(curves[i].e.implicit)) items.push_back(item(i, 3, 2 * i + 1, "SSM layers (implicit attention)"));
    }
    gp += "set title '(a) attention entropy; dashed: SSM layers'' implicit attention'\nplot ";
    for (std::size_t k = 0; k < items.size(); ++k) gp += (k ? ", " : "") + items[k];
    gp += "\n";
  }
  if (panel_b) {
    std::vector<std::string> items;
    for (std::size_t i = 0; i < curves.size(); ++i)
      if (has_any(curves[i].e.selection)) items.push_back(item(i, 4, 2 * i + 2, "selection"));
    // The uniform bound, when every curve has the same one (the same window length).
    if (bounds.size() == 1 && !unbounded)
      items.push_back(fmt::format("{:.9g} with lines lc rgb '#7f8c8d' dt 3 lw 1.5 title {}", *bounds.begin(),
                                  gnuplot_quote(fmt::format("uniform selection: log(window) = {:.3f}", *bounds.begin()))));
    // Selection entropies sit close below log L (Δ varies little along a window): the axis zooms on
    // them rather than starting at 0, where every curve would be one flat line.
    gp += "set yrange [*:*]\nset title '(b) selection entropy of the SSM layers (axis not from 0)'\nplot ";
    for (std::size_t k = 0; k < items.size(); ++k) gp += (k ? ", " : "") + items[k];
    gp += "\n";
  }
  gp += "unset multiplot\n";
  write_file_atomic(dir / (name + ".gp"), gp);
  return render_gnuplot(dir, name);
}

// The entropies of `scheme` in a record, when it has some.
std::optional<LayerEntropies> entropies_of(const json& record, const std::string& scheme, const std::string& where) {
  const json* st = scheme_statistics(record, scheme);
  if (!st) return std::nullopt;
  LayerEntropies e = read_layer_entropies(*st, where);
  if (!e.any()) return std::nullopt;
  return e;
}

}  // namespace

bool has_layer_entropies(const std::vector<json>& records, const std::string& scheme) {
  const std::vector<std::string> labels = unique_labels(records);
  for (std::size_t i = 0; i < records.size(); ++i)
    if (entropies_of(records[i], scheme, fmt::format("plot: {}: scheme '{}'", labels[i], scheme))) return true;
  return false;
}

std::vector<fs::path> plot_layer_entropies(const std::vector<json>& records, const fs::path& dir,
                                           const std::string& scheme) {
  QEVAL_CHECK(!records.empty(), "plot: no record to draw");
  const std::vector<std::string> labels = unique_labels(records);
  std::vector<EntropyCurve> curves;
  for (std::size_t i = 0; i < records.size(); ++i)
    if (auto e = entropies_of(records[i], scheme, fmt::format("plot: {}: scheme '{}'", labels[i], scheme)))
      curves.push_back({labels[i], std::move(*e)});
  QEVAL_CHECK(!curves.empty(), "plot: no record's scheme '{}' has per-layer entropies (statistics with attention, "
              "implicit attention or selection)", scheme);
  find_gnuplot();  // before any file is written
  fs::create_directories(dir);
  const std::string what = curves.size() == 1
                               ? fmt::format("{} ({}): entropy by layer", curves[0].label, scheme)
                               : fmt::format("{} models ({}): entropy by layer", curves.size(), scheme);
  std::vector<fs::path> out = {draw_entropies(curves, dir, "entropy_by_layer", "scheme " + scheme, what)};

  // One record: each scheme with per-layer entropies a line of its own, when there are several.
  if (records.size() == 1) {
    std::vector<EntropyCurve> schemes;
    for (const auto& s : records[0].at("schemes")) {
      if (is_rounding_variant(s) || !s.contains("statistics") || !s["statistics"].is_object()) continue;
      const std::string name = s.at("name").get<std::string>();
      LayerEntropies e = read_layer_entropies(s["statistics"], fmt::format("plot: {}: scheme '{}'", labels[0], name));
      if (e.any()) schemes.push_back({name, std::move(e)});
    }
    if (schemes.size() >= 2)
      out.push_back(draw_entropies(schemes, dir, "entropy_by_scheme", "each scheme of " + labels[0],
                                   fmt::format("{}: entropy by layer for each scheme", labels[0])));
  }
  return out;
}

}  // namespace qeval
