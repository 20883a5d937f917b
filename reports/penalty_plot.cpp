// penalties.png (reports/plot.h): the paired ΔNLL of each quantised scheme with its two noises,
// sampling (± se) and rounding (± band), so a reader sees at a glance which differences between
// schemes are larger than the band.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "common/error.h"
#include "common/files.h"
#include "records/rounding_band.h"
#include "reports/plot.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string number_or_nan(double x) { return std::isfinite(x) ? fmt::format("{:.9g}", x) : std::string("NaN"); }

double paired(const json& scheme, const char* key) {
  if (!scheme.contains("vs_full") || !scheme["vs_full"].is_object()) return NAN;
  const json& v = scheme["vs_full"].value(key, json(nullptr));
  return v.is_number() ? v.get<double>() : NAN;
}

// A data-file word: no blank, quote, comment sign or control byte can end the column.
std::string data_word(const std::string& text) {
  std::string word = gnuplot_text(text);
  for (char& c : word)
    if (c == ' ' || c == '"' || c == '#' || c == '\'') c = '_';
  return word.empty() ? std::string("_") : word;
}

}  // namespace

bool has_rounding_band(const json& record) {
  if (!record.contains("schemes") || !record["schemes"].is_array()) return false;
  for (const auto& s : record["schemes"])
    if (is_rounding_variant(s)) return true;
  return false;
}

fs::path plot_penalties(const std::vector<json>& records, const fs::path& dir) {
  QEVAL_CHECK(!records.empty(), "plot: no record to draw");
  find_gnuplot();  // before any file is written
  // One row per (record, quantised scheme): x position, label, ΔNLL, se, band sd (NaN: none).
  std::string dat = "# qeval plot: paired ΔNLL per quantised scheme (nats per token)\n"
                    "# x scheme dnll_mean dnll_se rounding_band_sd record\n";
  std::size_t rows = 0, x = 0;
  bool any_band = false;
  std::vector<std::string> titles;
  for (std::size_t r = 0; r < records.size(); ++r) {
    const json& record = records[r];
    titles.push_back(record_model_name(record));
    dat += fmt::format("{}# index {}: {}\n", r ? "\n\n" : "", r, gnuplot_text(titles.back()));
    for (const auto& s : record.at("schemes")) {
      if (&s == &record.at("schemes").front() || is_rounding_variant(s)) continue;  // full precision, variants
      const double mean = paired(s, "paired_dnll_mean");
      if (!std::isfinite(mean)) continue;  // no paired comparison (a perplexity that is not finite)
      const std::string name = s.at("name").get<std::string>();
      const std::optional<RoundingBand> band = rounding_band(record, name);
      any_band = any_band || band.has_value();
      ++x;
      ++rows;
      dat += fmt::format("{} {} {} {} {} {}\n", x, data_word(name), number_or_nan(mean),
                         number_or_nan(paired(s, "paired_dnll_se")), band ? number_or_nan(band->delta_nll_sd) : "NaN", r);
    }
    ++x;  // a gap between records
  }
  QEVAL_CHECK(rows > 0, "plot: no record has a quantised scheme with a paired ΔNLL against full precision: no penalty "
                        "to draw");
  fs::create_directories(dir);
  write_file_atomic(dir / "penalties.dat", dat);

  static constexpr const char* kColours[] = {"#c0392b", "#2e86c1", "#27ae60", "#8e44ad", "#d68910", "#17a589"};
  const std::size_t width = std::clamp<std::size_t>(200 + 60 * x, 800, 6000);
  std::string gp = "# qeval plot: paired ΔNLL per quantised scheme, ± se (sampling) and ± band (rounding)\n";
  gp += fmt::format("set terminal pngcairo size {},560 noenhanced font 'sans,10'\nset output 'penalties.png'\n", width);
  gp += fmt::format("set title {}\n", gnuplot_quote(fmt::format("paired ΔNLL vs full precision, ± se (black: sampling){}",
                                                               any_band ? ", ± band (orange: rounding)" : "")));
  gp += fmt::format("set xrange [0.4:{}.6]\n", x - 1);  // x ends on the gap after the last record
  gp += "set style fill solid 0.75 border -1\nset boxwidth 0.6\nset grid ytics\nset xtics rotate by -40 scale 0\n"
        "set bmargin 7\nset key top left opaque\nset ylabel 'paired ΔNLL (nats per token)'\n";
  std::string plot = "plot ";
  for (std::size_t r = 0; r < records.size(); ++r)
    plot += fmt::format("'penalties.dat' index {} using 1:3:xtic(2) with boxes lc rgb '{}' title {}, ", r,
                        kColours[r % std::size(kColours)], gnuplot_quote(titles[r]));
  plot += "'penalties.dat' using 1:3:4 with yerrorbars lc rgb '#000000' pt 7 ps 0.4 title '± se'";
  if (any_band)
    plot += ", 'penalties.dat' using ($1+0.2):3:5 with yerrorbars lc rgb '#e67e22' lw 2 pt 7 ps 0.4 title '± band'";
  gp += plot + "\n";
  write_file_atomic(dir / "penalties.gp", gp);
  return render_gnuplot(dir, "penalties");
}

}  // namespace qeval
