// kl_cdf.png and position_buckets.png (reports/plot.h): beyond the mean (issue 80). The KL CDF
// draws each quantised scheme's recorded per-token KL percentiles (min, 0.1 %, 1 %, …, 99.9 %, max:
// the points the record holds, joined) on a log KL axis; the buckets picture draws the paired ΔNLL
// ± se and the mean KL by prediction position bucket, one line per scheme, on a log2 position axis.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/files.h"
#include "eval/percentiles.h"
#include "records/rounding_band.h"
#include "reports/plot.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kColours[] = {"#c0392b", "#2e86c1", "#27ae60", "#8e44ad", "#d68910", "#17a589", "#34495e", "#e84393"};

std::string g(double x) { return std::isfinite(x) ? fmt::format("{:.9g}", x) : std::string("NaN"); }

// (record index, scheme entry) of every quantised scheme holding `key`, with its title.
struct Curve {
  const json* scheme;
  std::string title;
};
std::vector<Curve> curves_with(const std::vector<json>& records, const char* key) {
  std::vector<Curve> out;
  const std::vector<std::string> labels = unique_labels(records);
  for (std::size_t r = 0; r < records.size(); ++r)
    for (const auto& s : records[r].at("schemes")) {
      if (is_rounding_variant(s) || !s.contains(key)) continue;
      if (std::string(key) == "per_token" && !s[key].at("kl").contains("percentiles")) continue;
      const std::string name = s.at("name").get<std::string>();
      out.push_back({&s, records.size() > 1 ? labels[r] + ": " + name : name});
    }
  return out;
}

fs::path plot_kl_cdf(const std::vector<Curve>& curves, const fs::path& dir) {
  std::string dat = "# qeval plot: per-token KL(full ‖ scheme) percentiles, one block per scheme\n# kl fraction\n";
  for (std::size_t i = 0; i < curves.size(); ++i) {
    const json& p = curves[i].scheme->at("per_token").at("kl").at("percentiles");
    dat += fmt::format("{}# index {}: {}\n", i ? "\n\n" : "", i, gnuplot_text(curves[i].title));
    // Ascending: min, then the levels from 0.1 % up, then max. A KL of 0 or below (rounding) has no
    // place on a log axis: NaN, a gap.
    std::vector<std::pair<double, double>> points = {{p.at("min").get<double>(), 0.0}};
    const auto& levels = percentile_levels();
    for (auto it = levels.rbegin(); it != levels.rend(); ++it) points.push_back({p.at(it->name).get<double>(), it->fraction});
    points.push_back({p.at("max").get<double>(), 1.0});
    for (const auto& [kl, f] : points) dat += fmt::format("{} {}\n", kl > 0 ? g(kl) : "NaN", g(f));
  }
  write_file_atomic(dir / "kl_cdf.dat", dat);
  std::string gp = "# qeval plot: the per-token KL's distribution per scheme (its recorded percentiles)\n"
                   "set terminal pngcairo size 900,560 noenhanced font 'sans,10'\nset output 'kl_cdf.png'\n"
                   "set title 'per-token KL(full ‖ scheme): fraction of tokens at or below (recorded percentiles)'\n"
                   "set logscale x\nset format x '%.0e'\nset xlabel 'KL (nats)'\nset ylabel 'fraction of tokens'\n"
                   "set yrange [0:1]\nset grid\nset key bottom right opaque\n";
  std::string plot = "plot ";
  for (std::size_t i = 0; i < curves.size(); ++i)
    plot += fmt::format("{}'kl_cdf.dat' index {} using 1:2 with linespoints lc rgb '{}' pt 7 ps 0.6 title {}", i ? ", " : "",
                        i, kColours[i % std::size(kColours)], gnuplot_quote(curves[i].title));
  write_file_atomic(dir / "kl_cdf.gp", gp + plot + "\n");
  return render_gnuplot(dir, "kl_cdf");
}

fs::path plot_buckets(const std::vector<Curve>& curves, const fs::path& dir) {
  std::string dat = "# qeval plot: paired ΔNLL and mean KL by prediction position bucket, one block per scheme\n"
                    "# first_position last_position centre dnll_mean dnll_se kl_mean\n";
  for (std::size_t i = 0; i < curves.size(); ++i) {
    dat += fmt::format("{}# index {}: {}\n", i ? "\n\n" : "", i, gnuplot_text(curves[i].title));
    for (const auto& b : curves[i].scheme->at("position_buckets")) {
      const double a = b.at("positions")[0].get<double>(), z = b.at("positions")[1].get<double>();
      // On a log axis position 0 sits at 0.5, half a step left of position 1.
      const double centre = a == 0 ? 0.5 : std::sqrt(a * z);
      dat += fmt::format("{} {} {} {} {} {}\n", g(a), g(z), g(centre), g(b.at("paired_dnll_mean").get<double>()),
                         g(b.at("paired_dnll_se").get<double>()), g(b.at("kl_mean").get<double>()));
    }
  }
  write_file_atomic(dir / "position_buckets.dat", dat);
  std::string gp = "# qeval plot: where in the window the penalty falls\n"
                   "set terminal pngcairo size 900,800 noenhanced font 'sans,10'\nset output 'position_buckets.png'\n"
                   "set multiplot layout 2,1\nset logscale x 2\nset grid\nset key top right opaque\n"
                   "set xlabel 'prediction position (bucket centre; 0 drawn at 0.5)'\n";
  auto panel = [&](const char* title, const char* ylabel, const char* using_, const char* style) {
    std::string p = fmt::format("set title '{}'\nset ylabel '{}'\nplot ", title, ylabel);
    for (std::size_t i = 0; i < curves.size(); ++i)
      p += fmt::format("{}'position_buckets.dat' index {} using {} with {} lc rgb '{}' pt 7 ps 0.6 title {}", i ? ", " : "",
                       i, using_, style, kColours[i % std::size(kColours)], gnuplot_quote(curves[i].title));
    return p + "\n";
  };
  gp += panel("paired ΔNLL ± se by position bucket", "ΔNLL (nats per token)", "3:4:5", "yerrorlines");
  gp += panel("mean KL(full ‖ scheme) by position bucket", "KL (nats)", "3:6", "linespoints");
  gp += "unset multiplot\n";
  write_file_atomic(dir / "position_buckets.gp", gp);
  return render_gnuplot(dir, "position_buckets");
}

}  // namespace

bool has_token_tails(const std::vector<json>& records) {
  return !curves_with(records, "per_token").empty() || !curves_with(records, "position_buckets").empty();
}

std::vector<fs::path> plot_token_tails(const std::vector<json>& records, const fs::path& dir) {
  find_gnuplot();  // before any file is written
  fs::create_directories(dir);
  std::vector<fs::path> out;
  const auto cdf = curves_with(records, "per_token");
  if (!cdf.empty()) out.push_back(plot_kl_cdf(cdf, dir));
  const auto buckets = curves_with(records, "position_buckets");
  if (!buckets.empty()) out.push_back(plot_buckets(buckets, dir));
  QEVAL_CHECK(!out.empty(), "plot: no record has per-token KL percentiles or position buckets to draw");
  return out;
}

}  // namespace qeval
