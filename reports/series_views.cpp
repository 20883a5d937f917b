#include "reports/series_views.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <fstream>
#include <algorithm>
#include <map>

#include "common/printable.h"
#include "common/error.h"
#include "common/files.h"
#include "reports/plot.h"
#include "records/series_record.h"
#include "reports/table.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

// The statistics columns, by the names series entries use (reports/check.h statistic_names()).
struct StatColumn {
  const char* name;
  const char* title;
  int decimals;
};
const std::vector<StatColumn>& stat_columns() {
  static const std::vector<StatColumn> columns = {
      {"kurtosis_first", "kurtosis first", 2}, {"kurtosis_rest", "kurtosis rest", 2},
      {"max_abs_first", "max \\|X\\| first", 2}, {"max_abs_rest", "max \\|X\\| rest", 2},
      {"first_attn_pct", "%first-attn", 2},     {"sink_rate_pct", "Sink₁^ε %", 2},
      {"attention_entropy", "entropy", 3}};
  return columns;
}

const nlohmann::json* entry_scheme(const nlohmann::json& entry, const std::string& name) {
  for (const auto& s : entry.at("schemes"))
    if (s.at("name") == name) return &s;
  return nullptr;
}

// The reference scheme: "full", else the first (the reference of every penalty).
std::string full_name(const nlohmann::json& entry) {
  QEVAL_CHECK(!entry.at("schemes").empty(), "series: checkpoint at step {} has no schemes", entry.at("step").dump());
  return entry_scheme(entry, "full") ? "full" : entry.at("schemes").front().at("name").get<std::string>();
}

// The quantised schemes of a run, in the order of its first checkpoint.
std::vector<std::string> penalty_schemes(const nlohmann::json& series) {
  std::vector<std::string> names;
  const auto& checkpoints = series.at("checkpoints");
  if (checkpoints.empty()) return names;
  const std::string full = full_name(checkpoints.front());
  for (const auto& s : checkpoints.front().at("schemes"))
    if (s.at("name") != full) names.push_back(s.at("name").get<std::string>());
  return names;
}

nlohmann::json stat_of(const nlohmann::json& entry, const char* name) {
  const nlohmann::json& st = entry.at("statistics");
  const std::string full = full_name(entry);
  const nlohmann::json* scheme = st.contains(full) ? &st[full] : (st.empty() ? nullptr : &st.begin().value());
  return scheme && scheme->contains(name) && (*scheme)[name].is_number() ? (*scheme)[name] : nlohmann::json(nullptr);
}

nlohmann::json scheme_field(const nlohmann::json& entry, const std::string& scheme, const char* key) {
  const nlohmann::json* s = entry_scheme(entry, scheme);
  return s && s->contains(key) && (*s)[key].is_number() ? (*s)[key] : nlohmann::json(nullptr);
}

nlohmann::json training_field(const nlohmann::json& entry, const char* key) {
  const nlohmann::json t = entry.value("training", nlohmann::json::object());
  return t.is_object() && t.contains(key) && t[key].is_number() ? t[key] : nlohmann::json(nullptr);
}

std::string tokens_text(const nlohmann::json& v) {
  if (!v.is_number()) return "—";
  const double t = v.get<double>();
  if (t >= 1e6) return fmt::format("{:.2f} M", t / 1e6);
  if (t >= 1e3) return fmt::format("{:.1f} k", t / 1e3);
  return fmt::format("{:.0f}", t);
}

std::string signed_text(const nlohmann::json& v, int decimals) {
  return v.is_number() ? fmt::format("{:+.{}f}", v.get<double>(), decimals) : "—";
}

std::string dnll_text(const nlohmann::json& mean, const nlohmann::json& se) {
  if (!mean.is_number()) return "—";
  return se.is_number() ? fmt::format("{:+.5f} ± {:.5f}", mean.get<double>(), se.get<double>())
                        : fmt::format("{:+.5f}", mean.get<double>());
}

// One row per checkpoint, every column of the table (numbers or null).
nlohmann::json series_rows(const nlohmann::json& series) {
  nlohmann::json rows = nlohmann::json::array();
  const std::vector<std::string> schemes = penalty_schemes(series);
  for (const auto& e : series.at("checkpoints")) {
    const std::string full = full_name(e);
    nlohmann::json row = {{"step", e.at("step")},
                          {"tokens", e.value("tokens", nlohmann::json(nullptr))},
                          {"lr", training_field(e, "lr")},
                          {"val_loss", training_field(e, "val_loss")},
                          {"ppl", scheme_field(e, full, "ppl")},
                          {"nll_mean", scheme_field(e, full, "nll_mean")},
                          {"nll_se", scheme_field(e, full, "nll_se")}};
    nlohmann::json penalties = nlohmann::json::object();
    for (const auto& s : schemes)
      penalties[s] = {{"dppl", scheme_field(e, s, "dppl")},
                      {"paired_dnll_mean", scheme_field(e, s, "paired_dnll_mean")},
                      {"paired_dnll_se", scheme_field(e, s, "paired_dnll_se")}};
    row["penalties"] = penalties;
    for (const auto& c : stat_columns()) row[c.name] = stat_of(e, c.name);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

void prepare_series(std::vector<LabeledSeries>& runs, bool allow_protocol_mismatch) {
  QEVAL_CHECK(!runs.empty(), "no series given");
  std::map<std::string, int> seen;
  for (auto& r : runs) {
    QEVAL_CHECK(!r.series.at("checkpoints").empty(), "{}: the series has no checkpoints", r.source);
    if (r.label.empty()) r.label = series_label(r.series);
    seen[r.label]++;
  }
  for (auto& r : runs)
    if (seen[r.label] > 1) r.label += " (" + fs::path(r.source).stem().string() + ")";
  if (allow_protocol_mismatch) return;
  // Same rule as compare for records: the measurement must agree, the models may differ.
  auto measurement = [](const LabeledSeries& r) {
    const nlohmann::json& e = r.series.at("evaluation");
    return nlohmann::json{{"protocol", e.value("protocol", nlohmann::json(nullptr))},
                          {"data", e.value("data", nlohmann::json(nullptr))},
                          {"data_options", e.value("data_options", nlohmann::json(nullptr))}};
  };
  for (const auto& r : runs)
    QEVAL_CHECK(measurement(r) == measurement(runs.front()),
                "series {} and {} were evaluated under different protocols or data ({}); pass "
                "--allow-protocol-mismatch to show them together anyway",
                runs.front().source, r.source, fmt::join(json_differences(measurement(runs.front()), measurement(r)), "; "));
}

std::string format_series(const std::vector<LabeledSeries>& runs, CompareFormat format) {
  if (format == CompareFormat::json) {
    nlohmann::json out = {{"runs", nlohmann::json::array()}};
    for (const auto& r : runs)
      out["runs"].push_back({{"label", r.label.empty() ? series_label(r.series) : r.label},
                             {"source", r.source},
                             {"rows", series_rows(r.series)}});
    return utf8_safe(out).dump(2) + "\n";  // a label or path that is not UTF-8, escaped
  }
  if (format == CompareFormat::csv) {
    std::vector<std::string> schemes;
    for (const auto& r : runs)
      for (const auto& s : penalty_schemes(r.series))
        if (std::find(schemes.begin(), schemes.end(), s) == schemes.end()) schemes.push_back(s);
    std::string out = "run,source,step,tokens,lr,val_loss,ppl,nll_mean,nll_se";
    for (const auto& s : schemes)
      out += "," + csv_field("dppl_" + s) + "," + csv_field("dnll_" + s) + "," + csv_field("dnll_se_" + s);
    for (const auto& c : stat_columns()) out += fmt::format(",{}", c.name);
    out += "\n";
    for (const auto& r : runs) {
      const std::string label = r.label.empty() ? series_label(r.series) : r.label;
      for (const auto& row : series_rows(r.series)) {
        out += csv_value(label) + "," + csv_value(r.source);
        for (const char* key : {"step", "tokens", "lr", "val_loss", "ppl", "nll_mean", "nll_se"})
          out += "," + csv_value(row[key]);
        for (const auto& s : schemes) {
          const nlohmann::json p = row["penalties"].value(s, nlohmann::json::object());
          for (const char* key : {"dppl", "paired_dnll_mean", "paired_dnll_se"})
            out += "," + csv_value(p.value(key, nlohmann::json(nullptr)));
        }
        for (const auto& c : stat_columns()) out += "," + csv_value(row[c.name]);
        out += "\n";
      }
    }
    return out;
  }

  std::string out;
  for (const auto& r : runs) {
    const std::string label = r.label.empty() ? series_label(r.series) : r.label;
    const std::vector<std::string> schemes = penalty_schemes(r.series);
    const nlohmann::json rows = series_rows(r.series);
    out += fmt::format("Trajectory of {} ({}, {} checkpoints)\n\n", printable(label, std::string::npos),
                       printable(r.source, std::string::npos), rows.size());
    out += "| step | tokens | lr | val loss | PPL |";
    std::string rule = "|---:|---:|---:|---:|---:|";
    for (const auto& s : schemes) {
      out += fmt::format(" {0} ΔPPL | {0} ΔNLL ± se |", markdown_cell(s));
      rule += "---:|---:|";
    }
    out += "\n" + rule + "\n";
    for (const auto& row : rows) {
      out += fmt::format("| {} | {} | {} | {} | {} |", row["step"].dump(), tokens_text(row["tokens"]),
                         row["lr"].is_number() ? fmt::format("{:.2e}", row["lr"].get<double>()) : "—",
                         table_number(row["val_loss"], 4), table_number(row["ppl"], 3));
      for (const auto& s : schemes) {
        const nlohmann::json& p = row["penalties"][s];
        out += fmt::format(" {} | {} |", signed_text(p["dppl"], 4), dnll_text(p["paired_dnll_mean"], p["paired_dnll_se"]));
      }
      out += "\n";
    }
    out += "\n| step | tokens |";
    rule = "|---:|---:|";
    for (const auto& c : stat_columns()) {
      out += fmt::format(" {} |", c.title);
      rule += "---:|";
    }
    out += "\n" + rule + "\n";
    for (const auto& row : rows) {
      out += fmt::format("| {} | {} |", row["step"].dump(), tokens_text(row["tokens"]));
      for (const auto& c : stat_columns()) out += " " + table_number(row[c.name], c.decimals) + " |";
      out += "\n";
    }
    out += "\n";
  }
  out += "- PPL and statistics of full precision; ΔPPL and paired ΔNLL (nats a token ± standard error) of each "
         "scheme against it; \"—\": not known or not collected.\n";
  return out;
}

SeriesAxis parse_series_axis(const std::string& s) {
  if (s == "tokens") return SeriesAxis::tokens;
  if (s == "step") return SeriesAxis::step;
  if (s == "progress") return SeriesAxis::progress;
  fail("unknown axis '{}': expected tokens, step or progress", s);
}

std::vector<fs::path> plot_series(const std::vector<LabeledSeries>& runs, const fs::path& dir, SeriesAxis axis) {
  find_gnuplot();
  fs::create_directories(dir);
  bool all_tokens = true;
  for (const auto& r : runs)
    for (const auto& e : r.series.at("checkpoints")) {
      all_tokens &= e.value("tokens", nlohmann::json(nullptr)).is_number();
      QEVAL_CHECK(axis != SeriesAxis::progress || training_field(e, "total_steps").is_number(),
                  "plot --x progress: {} does not know the length of its schedule (step {})", r.source,
                  e.at("step").dump());
    }
  // Tokens when every run knows them; else steps.
  if (axis == SeriesAxis::tokens && !all_tokens) axis = SeriesAxis::step;
  const char* x_title = axis == SeriesAxis::tokens ? "tokens seen"
                        : axis == SeriesAxis::step ? "step"
                                                   : "fraction of the schedule (step / total steps)";
  auto x_of = [&](const nlohmann::json& entry, const nlohmann::json& row) -> nlohmann::json {
    switch (axis) {
      case SeriesAxis::tokens: return row["tokens"];
      case SeriesAxis::step: return row["step"];
      case SeriesAxis::progress:
        return row["step"].get<double>() / training_field(entry, "total_steps").get<double>();
    }
    return nullptr;
  };
  std::vector<std::string> schemes;
  for (const auto& r : runs)
    for (const auto& s : penalty_schemes(r.series))
      if (std::find(schemes.begin(), schemes.end(), s) == schemes.end()) schemes.push_back(s);

  // One gnuplot data block per run (separated by two blank lines: `index i`). Columns: 1 x, 2 ppl,
  // 3 val_loss, 4/5 kurtosis first/rest, 6/7 max |X| first/rest, 8 %first-attn, 9 sink, 10 entropy,
  // 11... each scheme's paired ΔNLL.
  const std::vector<const char*> keys = {"ppl", "val_loss", "kurtosis_first", "kurtosis_rest", "max_abs_first",
                                         "max_abs_rest", "first_attn_pct", "sink_rate_pct", "attention_entropy"};
  auto num = [](const nlohmann::json& v) { return v.is_number() ? fmt::format("{:.9g}", v.get<double>()) : "NaN"; };
  std::map<std::pair<std::size_t, int>, bool> has;  // (run, column) has a number somewhere
  std::string dat = "# x ppl val_loss kurtosis_first kurtosis_rest max_abs_first max_abs_rest first_attn_pct "
                    "sink_rate_pct attention_entropy";
  for (const auto& s : schemes) dat += " dnll_" + gnuplot_text(s);
  dat += fmt::format("\n# x = {}\n", gnuplot_text(x_title));
  for (std::size_t i = 0; i < runs.size(); ++i) {
    dat += fmt::format("# run {}: {}\n", i, gnuplot_text(runs[i].label));
    const nlohmann::json rows = series_rows(runs[i].series);
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const nlohmann::json& row = rows[k];
      const nlohmann::json x = x_of(runs[i].series.at("checkpoints").at(k), row);
      if (!x.is_number() || x.get<double>() <= 0) continue;  // a log axis has no place for 0
      std::vector<nlohmann::json> values;
      for (const char* key : keys) values.push_back(row[key]);
      for (const auto& s : schemes)
        values.push_back(row["penalties"].value(s, nlohmann::json::object()).value("paired_dnll_mean", nlohmann::json(nullptr)));
      dat += num(x);
      for (std::size_t k = 0; k < values.size(); ++k) {
        dat += " " + num(values[k]);
        if (values[k].is_number()) has[{i, static_cast<int>(k) + 2}] = true;
      }
      dat += "\n";
    }
    dat += "\n\n";
  }
  write_file_atomic(dir / "trajectory.dat", dat);

  static const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  std::string gp = "set terminal pngcairo size 1400,1500 font ',10'\nset output 'trajectory.png'\n";
  gp += "set datafile missing 'NaN'\nset logscale x\nset grid\nset key top left font ',8'\n";
  gp += fmt::format("set xlabel {}\n", gnuplot_quote(x_title));
  gp += "set multiplot layout 4,2 title 'trajectory over training (full precision unless named)'\n";
  struct Curve {
    std::size_t run;
    int column, dash;
    std::string title;
  };
  // A panel of curves; those without a single number are left out (gnuplot stops on an empty
  // plot), and a panel with none says so.
  auto panel = [&](const std::string& title, const std::vector<Curve>& curves, bool log_y) {
    std::vector<std::string> parts;
    for (const auto& c : curves)
      if (has[{c.run, c.column}])
        parts.push_back(fmt::format("'trajectory.dat' index {} using 1:{} with linespoints lw 2 dt {} pt 7 ps 0.6 lc rgb "
                                    "'{}' title {}",
                                    c.run, c.column, c.dash, colours[c.run % 8], gnuplot_quote(c.title)));
    gp += fmt::format("set title {}\n", gnuplot_quote(title));
    if (parts.empty()) {
      gp += "unset logscale y\nset yrange [0:1]\nset label 1 'not known' at graph 0.5,0.5 center\nplot 2 notitle\n"
            "unset label 1\nset autoscale y\n";
      return;
    }
    gp += fmt::format("{}\nplot {}\n", log_y ? "set logscale y" : "unset logscale y", fmt::join(parts, ", \\\n     "));
  };
  auto per_run = [&](int column, const std::string& suffix, int dash = 1) {
    std::vector<Curve> curves;
    for (std::size_t i = 0; i < runs.size(); ++i) curves.push_back({i, column, dash, runs[i].label + suffix});
    return curves;
  };
  auto pair = [&](int rest, int first) {
    std::vector<Curve> curves = per_run(rest, " rest");
    for (auto& c : per_run(first, " first", 2)) curves.push_back(c);
    return curves;
  };
  std::vector<Curve> penalties;
  for (std::size_t s = 0; s < schemes.size(); ++s)
    for (auto& c : per_run(11 + static_cast<int>(s), " " + schemes[s], 1 + static_cast<int>(s % 4))) penalties.push_back(c);
  panel("perplexity", per_run(2, ""), true);
  panel("quantisation penalty: paired ΔNLL (nats a token)", penalties, false);
  panel("kurtosis (solid: other tokens, dashed: first token)", pair(5, 4), true);
  panel("max |X| (solid: other tokens, dashed: first token)", pair(7, 6), true);
  panel("%first-attn", per_run(8, ""), false);
  panel("Sink₁^ε (% of heads)", per_run(9, ""), false);
  panel("attention entropy (nats)", per_run(10, ""), false);
  panel("trainer's validation loss", per_run(3, ""), false);
  gp += "unset multiplot\n";
  write_file_atomic(dir / "trajectory.gp", gp);
  return {render_gnuplot(dir, "trajectory")};
}

}  // namespace qeval
