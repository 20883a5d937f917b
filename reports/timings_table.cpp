#include "reports/timings_table.h"

#include <fmt/format.h>

#include "common/phases.h"
#include "common/printable.h"

namespace qeval {
namespace {

// The record's phase seconds in phase order, or nothing when it has no (well-formed) timings.
std::vector<nlohmann::json> phase_cells(const nlohmann::json& record) {
  std::vector<nlohmann::json> cells;
  const nlohmann::json timings = record.value("timings", nlohmann::json(nullptr));
  if (!timings.is_object() || !timings.contains("phases") || !timings["phases"].is_object()) return cells;
  cells.push_back(timings.value("total_s", nlohmann::json(nullptr)));
  for (std::size_t i = 0; i < kPhaseCount; ++i)
    cells.push_back(timings["phases"].value(phase_name(static_cast<Phase>(i)), nlohmann::json(nullptr)));
  return cells;
}

std::string seconds_text(const nlohmann::json& v) {
  return v.is_number() ? fmt::format("{:.2f}", v.get<double>()) : std::string("—");
}

}  // namespace

std::string format_timings(const std::vector<LabeledRecord>& records, CompareFormat format) {
  std::vector<std::string> columns = {"total"};
  for (std::size_t i = 0; i < kPhaseCount; ++i) columns.push_back(phase_name(static_cast<Phase>(i)));
  if (format == CompareFormat::json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : records) {
      const nlohmann::json timings = r.record.value("timings", nlohmann::json(nullptr));
      rows.push_back({{"model", r.label}, {"record", r.source}, {"timings", timings.is_object() ? timings : nlohmann::json(nullptr)}});
    }
    return utf8_safe(nlohmann::json{{"timings", rows}}).dump(2) + "\n";  // a label or path that is not UTF-8, escaped
  }
  const bool csv = format == CompareFormat::csv;
  std::string out = csv ? "model" : "\n### Time by phase (seconds; the phases add up to the total)\n\n| model";
  for (const auto& c : columns) out += csv ? "," + c + "_s" : " | " + c;
  out += csv ? "\n" : " |\n|---";
  if (!csv) {
    for (std::size_t i = 0; i < columns.size(); ++i) out += "|---:";
    out += "|\n";
  }
  for (const auto& r : records) {
    const std::vector<nlohmann::json> cells = phase_cells(r.record);
    // A label is the user's text: escaped like every other name in a table ('|' in Markdown, a
    // leading '=' in CSV).
    out += csv ? csv_field(r.label) : "| " + markdown_cell(r.label);
    for (std::size_t i = 0; i < columns.size(); ++i) {
      const std::string text = i < cells.size() ? seconds_text(cells[i]) : std::string("—");
      out += csv ? "," + (text == "—" ? std::string() : text) : " | " + text;
    }
    out += csv ? "\n" : " |\n";
  }
  return out;
}

}  // namespace qeval
