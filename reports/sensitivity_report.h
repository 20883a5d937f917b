// `qeval sensitivity`'s report from a record's "sensitivity" section (eval/sensitivity.h writes
// it): a Markdown table, one row per unit, and a gnuplot bar chart.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace qeval {

// Markdown: a title line (model, data, windows, scheme, grouping) and one row per unit, largest
// ΔNLL first, at most `top` rows (all when top <= 0): rank, unit, ΔNLL ± se (and ± its rounding
// band, ⚠ where the band exceeds the se, when the units have bands), ΔPPL %, first-token share of
// ΔNLL, input kurtosis first/rest, max|x| first/rest, ‖x‖∞/‖x‖₂ rest, the positions with the
// largest mean ΔNLL. `record` is a record with a "sensitivity" section.
std::string sensitivity_table_markdown(const nlohmann::json& record, std::int64_t top = 0);

// A gnuplot bar chart of ΔNLL per unit (sorted, with ± se, and ± the rounding band beside it when
// the units have bands), the input max|x| (first position and the rest) on a second, logarithmic
// axis. Writes PNG and, beside it, <stem>.dat and <stem>.gp (redraw with `cd DIR && gnuplot
// STEM.gp`). Throws when gnuplot is missing or fails.
std::filesystem::path plot_sensitivity(const nlohmann::json& record, const std::filesystem::path& png);

}  // namespace qeval
