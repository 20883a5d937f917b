#include "reports/plot.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/error.h"
#include "common/files.h"
#include "common/json_integer.h"
#include "common/printable.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string num(const nlohmann::json& v) {
  return v.is_number() ? fmt::format("{:.9g}", v.get<double>()) : std::string("NaN");
}

// Magma-like: dark for zero, bright for the largest value (readable in print and on screen).
constexpr const char* kPalette =
    "set palette defined (0 '#000004', 0.2 '#3b0f70', 0.4 '#8c2981', 0.6 '#de4968', 0.8 '#fe9f6d', 1 '#fcfdbf')\n";

}  // namespace

// Inside gnuplot's single quotes nothing is substituted (no `command`, no @macro, no backslash
// escape); only a line end ends the literal and starts a command of the file's own. Control bytes
// are therefore written as visible escapes (printable: a newline becomes the two characters \n),
// so no name from a record, a scheme file or a folder can run anything through gnuplot.
std::string gnuplot_quote(const std::string& s) {
  std::string out = "'";
  for (char c : gnuplot_text(s)) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

std::string gnuplot_text(const std::string& s) { return printable(s, std::string::npos); }

namespace {

// A list of rows of numbers (or nulls), checked before use so that a value of another type is named
// by its key path ("hidden_abs.first[2][5]"), not by nlohmann's "cannot use at() with string".
void check_number_matrix(const nlohmann::json& m, const std::string& where) {
  QEVAL_CHECK(m.is_array(), "figure data: {} should be a list of rows, found {}", where, json_text(m, 60));
  for (std::size_t r = 0; r < m.size(); ++r) {
    QEVAL_CHECK(m[r].is_array(), "figure data: {}[{}] should be a list of numbers, found {}", where, r, json_text(m[r], 60));
    for (std::size_t c = 0; c < m[r].size(); ++c)
      QEVAL_CHECK(m[r][c].is_number() || m[r][c].is_null(), "figure data: {}[{}][{}] should be a number, found {}", where, r,
                  c, json_text(m[r][c], 60));
  }
}

}  // namespace

fs::path render_gnuplot(const fs::path& dir, const std::string& name) {
  const fs::path gnuplot = find_gnuplot();
  const fs::path log = dir / (name + ".log");
  const std::string cmd = fmt::format("cd {} && {} {} > {} 2>&1", shell_quote(dir.string()), shell_quote(gnuplot.string()),
                                      shell_quote(name + ".gp"), shell_quote(log.filename().string()));
  const fs::path png = dir / (name + ".png");
  fs::remove(png);
  const int status = std::system(cmd.c_str());
  std::string messages = fs::exists(log) ? read_file(log) : "";
  QEVAL_CHECK(status == 0 && fs::exists(png) && fs::file_size(png) > 0, "gnuplot failed on {} (status {}): {}",
              (dir / (name + ".gp")).string(), status, messages.substr(0, 2000));
  fs::remove(log);
  return png;
}

namespace {

// Log scale when the values span more than a factor 30 (kurtosis and max |X| of models with
// massive activations do; a healthy model's sit near 3 and would look flat on a log axis).
// Non-positive and NaN values (a layer a record lacks) do not count.
bool wants_log(const std::vector<double>& values) {
  double lo = INFINITY, hi = 0;
  for (double x : values)
    if (x > 0) lo = std::min(lo, x), hi = std::max(hi, x);
  return hi > 0 && lo < INFINITY && hi / lo > 30;
}

}  // namespace

fs::path find_gnuplot() {
  if (const char* env = std::getenv("QEVAL_GNUPLOT"); env && *env) {
    QEVAL_CHECK(::access(env, X_OK) == 0,
                "QEVAL_GNUPLOT={} is not an executable; install gnuplot (Debian package gnuplot-nox) or unset it", env);
    return env;
  }
  if (const char* path = std::getenv("PATH")) {
    std::stringstream in(path);
    for (std::string dir; std::getline(in, dir, ':');) {
      if (dir.empty()) continue;
      fs::path candidate = fs::path(dir) / "gnuplot";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  fail("gnuplot not found on PATH: pictures are drawn by gnuplot with the pngcairo terminal; install the Debian "
       "package gnuplot-nox (apt-get install gnuplot-nox), or set QEVAL_GNUPLOT to its path");
}

std::string record_model_name(const nlohmann::json& record) {
  fs::path model = record.contains("model") && record["model"].contains("path") && record["model"]["path"].is_string()
                       ? fs::path(record["model"]["path"].get<std::string>())
                       : fs::path("model");
  if (model.filename().empty()) model = model.parent_path();
  std::string stem = model.has_extension() ? model.stem().string() : model.filename().string();
  if (stem == "model" || stem == "pytorch_model") stem = model.parent_path().filename().string();
  // A shard or a partial merge is marked wherever the record is named (qeval plot --allow-partial),
  // and so is a record measured under another protocol (--allow-protocol-mismatch sets "plot_mark").
  if ((record.contains("shard") && !record["shard"].is_null()) || (record.contains("partial") && !record["partial"].is_null()))
    stem += " (partial)";
  if (record.contains("plot_mark") && record["plot_mark"].is_string()) stem += " " + record["plot_mark"].get<std::string>();
  return stem;
}

std::vector<fs::path> plot_layer_curves(const nlohmann::json& record, const fs::path& dir, const std::string& scheme) {
  return plot_layer_curves(std::vector<nlohmann::json>{record}, dir, scheme);
}

namespace {

// One record's per-layer statistics of one scheme, as read from the record.
struct LayerCurves {
  std::string label;
  std::vector<double> kurtosis_first, kurtosis_rest, max_first, max_rest, first_attn, sink_rate;  // NaN: absent
  std::string windows;
  nlohmann::json sink_eps;
};

LayerCurves read_layer_curves(const nlohmann::json& record, const std::string& scheme, const std::string& label) {
  const nlohmann::json* entry = nullptr;
  for (const auto& s : record.at("schemes"))
    if (s.at("name") == scheme) entry = &s;
  QEVAL_CHECK(entry, "plot: {}: the record has no scheme '{}'", label, scheme);
  const nlohmann::json& st = entry->at("statistics");
  QEVAL_CHECK(st.is_object(), "plot: {}: scheme '{}' has no statistics in the record (evaluate with --stats-for {})", label,
              scheme, scheme == "full" ? "full" : "all");
  const auto& h = st.at("hidden");
  auto column = [](const nlohmann::json& list) {
    std::vector<double> out;
    for (const auto& v : list) out.push_back(v.is_number() ? v.get<double>() : NAN);
    return out;
  };
  LayerCurves c;
  c.label = label;
  c.kurtosis_first = column(h.at("kurtosis").at("per_layer").at("first"));
  c.kurtosis_rest = column(h.at("kurtosis").at("per_layer").at("rest"));
  c.max_first = column(h.at("max_abs").at("per_layer").at("first"));
  c.max_rest = column(h.at("max_abs").at("per_layer").at("rest"));
  if (st.contains("attention") && st["attention"].is_object()) {
    const nlohmann::json& a = st["attention"];
    // A hybrid's attention lists its layers: each value goes to its layer, the other layers are gaps.
    auto at_layers = [&](std::vector<double> values) {
      if (!a.contains("layers")) return values;
      const nlohmann::json& layers = a["layers"];
      QEVAL_CHECK(layers.is_array() && layers.size() == values.size(),
                  "plot: {}: statistics.attention.layers should list the {} attention layers", label, values.size());
      std::vector<double> out(c.kurtosis_first.size(), NAN);
      for (std::size_t i = 0; i < values.size(); ++i) {
        const std::int64_t m = json_integer(layers[i], fmt::format("plot: {}: statistics.attention.layers[{}]", label, i));
        QEVAL_CHECK(m >= 0 && static_cast<std::size_t>(m) < out.size(),
                    "plot: {}: statistics.attention.layers[{}] is {}, but the model has {} layers", label, i, m, out.size());
        out[static_cast<std::size_t>(m)] = values[i];
      }
      return out;
    };
    c.first_attn = at_layers(column(a.at("per_layer").at("first_attn_pct")));
    c.sink_rate = at_layers(column(a.at("per_layer").at("sink_rate_pct")));
    c.sink_eps = a.value("sink_eps", nlohmann::json(0.3));
  }
  c.windows = st.value("windows", nlohmann::json(0)).dump();  // as written: no cast of what a file says
  return c;
}

// A layer a record lacks, or a value it did not have, is gnuplot's NaN (a gap in the curve).
std::string cell(const std::vector<double>& v, std::size_t m) {
  return m < v.size() && std::isfinite(v[m]) ? num(v[m]) : std::string("NaN");
}

}  // namespace

std::vector<std::string> unique_labels(const std::vector<nlohmann::json>& records) {
  std::vector<std::string> names, labels;
  for (const auto& r : records) names.push_back(record_model_name(r));
  for (std::size_t i = 0; i < names.size(); ++i)
    labels.push_back(std::count(names.begin(), names.end(), names[i]) > 1 ? fmt::format("{} [{}]", names[i], i + 1)
                                                                          : names[i]);
  return labels;
}

std::vector<fs::path> plot_layer_curves(const std::vector<nlohmann::json>& records, const fs::path& dir,
                                        const std::string& scheme) {
  QEVAL_CHECK(!records.empty(), "plot: no record to draw");
  const std::vector<std::string> labels = unique_labels(records);
  std::vector<LayerCurves> curves;
  for (std::size_t i = 0; i < records.size(); ++i) curves.push_back(read_layer_curves(records[i], scheme, labels[i]));
  fs::create_directories(dir);

  // One data block per record (gnuplot's `index i`), in the order given.
  std::string dat = "# per-layer statistics of scheme " + gnuplot_text(scheme) + " (qeval plot; layer is 1-based)\n"
                    "# layer kurtosis_first kurtosis_rest max_abs_first max_abs_rest first_attn_pct sink_rate_pct\n";
  std::size_t layers = 0;
  bool attention = false;
  std::vector<double> kurtosis, max_abs;  // every value, for the choice of log scale
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const LayerCurves& c = curves[i];
    dat += fmt::format("{}# index {}: {}\n", i ? "\n\n" : "", i, gnuplot_text(c.label));
    for (std::size_t m = 0; m < c.kurtosis_first.size(); ++m)
      dat += fmt::format("{} {} {} {} {} {} {}\n", m + 1, cell(c.kurtosis_first, m), cell(c.kurtosis_rest, m),
                         cell(c.max_first, m), cell(c.max_rest, m), cell(c.first_attn, m), cell(c.sink_rate, m));
    layers = std::max(layers, c.kurtosis_first.size());
    attention = attention || !c.first_attn.empty();
    kurtosis.insert(kurtosis.end(), c.kurtosis_first.begin(), c.kurtosis_first.end());
    kurtosis.insert(kurtosis.end(), c.kurtosis_rest.begin(), c.kurtosis_rest.end());
    max_abs.insert(max_abs.end(), c.max_first.begin(), c.max_first.end());
    max_abs.insert(max_abs.end(), c.max_rest.begin(), c.max_rest.end());
  }
  write_file_atomic(dir / "layer_curves.dat", dat);

  // One record: first token red, other tokens blue. Several: one colour per record, the first
  // token dashed with open points, the other tokens solid, on shared axes so the models compare.
  const bool single = curves.size() == 1;
  const std::string title =
      single ? fmt::format("{} ({}): per-layer statistics over {} windows", curves[0].label, scheme, curves[0].windows)
             : fmt::format("{} models ({}): per-layer statistics; dashed: first token (sink rate), solid: other tokens (%first-attn)", curves.size(),
                           scheme);
  static constexpr const char* kColours[] = {"#c0392b", "#2e86c1", "#27ae60", "#8e44ad",
                                             "#d68910", "#17a589", "#7f8c8d", "#000000"};
  // The key (two lines a record) goes below each panel, out of the curves' way, in columns of at
  // most kKeyRows lines; the picture grows with its rows so the panels keep their height.
  constexpr std::size_t kKeyRows = 8;
  const std::size_t key_rows = std::min(2 * curves.size(), kKeyRows);
  std::string gp = "# qeval plot: per-layer kurtosis, max |activation| and first-token attention\n";
  gp += fmt::format("set terminal pngcairo size {},{} noenhanced font 'sans,10'\nset output 'layer_curves.png'\n",
                    attention ? 1500 : 1000, 420 + 20 * key_rows);
  gp += fmt::format("set multiplot layout 1,{} title {}\n", attention ? 3 : 2, gnuplot_quote(title));
  gp += fmt::format("set xrange [0.5:{}.5]\n", layers);
  gp += fmt::format("set grid\nset key below vertical maxrows {}\nset xlabel 'layer'\nset xtics 1\n", kKeyRows);
  if (single) {
    gp += "set style line 1 lc rgb '#c0392b' lw 2 pt 7 ps 0.8\nset style line 2 lc rgb '#2e86c1' lw 2 pt 5 ps 0.8\n";
  } else {
    for (std::size_t i = 0; i < curves.size(); ++i) {
      const char* colour = kColours[i % std::size(kColours)];
      gp += fmt::format("set style line {} lc rgb '{}' lw 2 dt 2 pt 6 ps 0.8\n", 2 * i + 1, colour);
      gp += fmt::format("set style line {} lc rgb '{}' lw 2 pt 7 ps 0.8\n", 2 * i + 2, colour);
    }
  }
  // A plot command drawing columns `a` (first-token style) and `b` (solid style) of every record.
  auto plot_pair = [&](int a, int b, const std::string& a_name, const std::string& b_name) {
    std::string cmd = "plot ";
    for (std::size_t i = 0; i < curves.size(); ++i) {
      const std::string prefix = single ? "" : curves[i].label + ": ";
      cmd += fmt::format("{}'layer_curves.dat' index {} using 1:{} with linespoints ls {} title {}, ", i ? ", " : "", i, a,
                         2 * i + 1, gnuplot_quote(prefix + a_name));
      cmd += fmt::format("'' index {} using 1:{} with linespoints ls {} title {}", i, b, 2 * i + 2,
                         gnuplot_quote(prefix + b_name));
    }
    return cmd + "\n";
  };
  gp += wants_log(kurtosis) ? "set logscale y\n" : "unset logscale y\n";
  gp += "set title 'kurtosis of hidden states (Gaussian = 3)'\nset ylabel 'kurtosis'\n" +
        plot_pair(2, 3, "first token", "other tokens");
  gp += wants_log(max_abs) ? "set logscale y\n" : "unset logscale y\n";
  gp += "set title 'max |activation|'\nset ylabel 'max_d |X|'\n" + plot_pair(4, 5, "first token", "other tokens");
  if (attention) {
    const nlohmann::json eps = curves[0].sink_eps.is_null() ? nlohmann::json(0.3) : curves[0].sink_eps;
    gp += "unset logscale y\nset title 'attention to the first token'\nset ylabel '%'\nset yrange [0:*]\n";
    // Here the solid curve is %first-attn and the dashed one the sink rate.
    gp += plot_pair(7, 6, fmt::format("sink rate (alpha_1 > {})", num(eps)), "%first-attn (argmax on key 1)");
  }
  gp += "unset multiplot\n";
  write_file_atomic(dir / "layer_curves.gp", gp);
  return {render_gnuplot(dir, "layer_curves")};
}

ColourScale parse_colour_scale(const std::string& s) {
  if (s == "linear") return ColourScale::linear;
  if (s == "log") return ColourScale::log;
  fail("unknown colour scale '{}': expected linear or log", s);
}

std::vector<fs::path> plot_figure_maps(const nlohmann::json& fd, const fs::path& dir, const std::string& title,
                                       ColourScale scale) {
  const bool log = scale == ColourScale::log;
  // Attention weights span 1 down to ~1e-5 over a window; below 1e-4 reads as "none" on a map.
  const std::string attention_range = log ? "set logscale cb\nset cbrange [1e-4:1]\n" : "set cbrange [0:*]\n";
  const std::string hidden_range = log ? "set logscale cb\nset cbrange [*:*]\n" : "set cbrange [0:*]\n";
  fs::create_directories(dir);
  std::vector<fs::path> out;
  try {
    if (fd.contains("attention_map")) {
      const auto& am = fd.at("attention_map");
      const std::int64_t T = json_integer(am.at("T"), "figure data: attention_map T");
      const auto& layers = am.at("per_layer");
      for (std::size_t l = 0; l < layers.size(); ++l)
        if (!layers[l].is_null()) check_number_matrix(layers[l], fmt::format("attention_map.per_layer[{}]", l));
      QEVAL_CHECK(!layers.empty(), "figure data: attention_map has no layers");
      // Layers without attention (a hybrid's Mamba layers) are null and left out of the mean.
      std::size_t n_maps = 0;
      for (const auto& l : layers) n_maps += l.is_null() ? 0 : 1;
      QEVAL_CHECK(n_maps > 0, "figure data: attention_map has no attention layer");
      std::string dat = fmt::format("# mean attention over {} layers, heads and {} windows; row = query, column = key "
                                    "(0-based)\n",
                                    n_maps, am.at("windows").dump());
      for (std::int64_t i = 0; i < T; ++i) {
        for (std::int64_t j = 0; j < T; ++j) {
          double s = 0;
          for (const auto& l : layers)
            if (!l.is_null()) s += l.at(i).at(j).get<double>();
          dat += fmt::format("{}{:.6g}", j ? " " : "", s / static_cast<double>(n_maps));
        }
        dat += "\n";
      }
      write_file_atomic(dir / "attention_map.dat", dat);
      std::string gp = "# qeval: mean attention map (matrix: row = query, column = key)\n"
                       "set terminal pngcairo size 760,680 noenhanced font 'sans,10'\nset output 'attention_map.png'\n";
      gp += kPalette;
      gp += fmt::format("set title {}\n", gnuplot_quote(fmt::format("{}: mean attention over layers and heads (first {} tokens, "
                                                                "{} windows)", title, T, am.at("windows").dump())));
      gp += fmt::format("set xrange [-0.5:{}.5]\nset yrange [{}.5:-0.5]\nset size ratio -1\n", T - 1, T - 1);
      gp += "set xlabel 'key position'\nset ylabel 'query position'\nset cblabel 'attention weight" +
            std::string(log ? " (log scale)" : "") + "'\n" + attention_range +
            "set tics out\nplot 'attention_map.dat' matrix with image notitle\n";
      write_file_atomic(dir / "attention_map.gp", gp);
      out.push_back(render_gnuplot(dir, "attention_map"));
    }

    const auto& first = fd.at("hidden_abs").at("first");
    const auto& rest = fd.at("hidden_abs").at("rest");
    check_number_matrix(first, "hidden_abs.first");
    check_number_matrix(rest, "hidden_abs.rest");
    const std::size_t M = first.size();
    QEVAL_CHECK(M > 0, "figure data: hidden_abs has no layers");
    const std::size_t D = first.at(0).size();
    const bool has_rest = !rest.empty() && !rest.at(0).is_null();
    std::string dat = "# mean |hidden state| per layer (row, 1-based in the picture) and channel (column); block 0: "
                      "first token, block 1: other tokens\n";
    for (const auto* part : {&first, &rest}) {
      if (part == &rest && !has_rest) break;
      for (std::size_t m = 0; m < M; ++m) {
        for (std::size_t d = 0; d < D; ++d) dat += fmt::format("{}{:.6g}", d ? " " : "", part->at(m).at(d).get<double>());
        dat += "\n";
      }
      dat += "\n\n";
    }
    write_file_atomic(dir / "hidden_abs.dat", dat);
    std::string gp = "# qeval: mean |hidden state| per layer x channel (index 0: first token, 1: other tokens)\n";
    gp += fmt::format("set terminal pngcairo size 1100,{} noenhanced font 'sans,10'\nset output 'hidden_abs.png'\n",
                      has_rest ? 760 : 420);
    gp += kPalette;
    gp += fmt::format("set multiplot layout {},1 title {}\n", has_rest ? 2 : 1,
                      gnuplot_quote(fmt::format("{}: mean |hidden state| per layer and channel ({} windows)", title,
                                           fd.value("windows", nlohmann::json(0)).dump())));
    gp += fmt::format("set xrange [-0.5:{}.5]\nset yrange [0.5:{}.5]\nset ytics 1\nset tics out\n", D - 1, M);
    gp += "set xlabel 'channel'\nset ylabel 'layer'\n" + hidden_range;
    gp += "set title 'first token'\nplot 'hidden_abs.dat' index 0 matrix using 1:($2+1):3 with image notitle\n";
    if (has_rest)
      gp += "set title 'other tokens (mean over positions)'\n"
            "plot 'hidden_abs.dat' index 1 matrix using 1:($2+1):3 with image notitle\n";
    gp += "unset multiplot\n";
    write_file_atomic(dir / "hidden_abs.gp", gp);
    out.push_back(render_gnuplot(dir, "hidden_abs"));
  } catch (const nlohmann::json::exception& e) {
    fail("figure data is malformed: {}", e.what());
  }
  return out;
}

std::vector<fs::path> render_eval_plots(const nlohmann::json& record, const nlohmann::json& figure_data,
                                        const fs::path& dir, ColourScale scale) {
  fs::create_directories(dir);
  write_file_atomic(dir / "figure_data.json", figure_data.dump() + "\n");
  std::vector<fs::path> out = plot_figure_maps(figure_data, dir, record_model_name(record), scale);
  const auto& full = record.at("schemes").front();
  if (full.at("statistics").is_object()) {
    auto curves = plot_layer_curves(record, dir, full.at("name").get<std::string>());
    out.insert(out.end(), curves.begin(), curves.end());
  }
  return out;
}

}  // namespace qeval
