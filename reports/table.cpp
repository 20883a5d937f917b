#include "reports/table.h"

#include "common/printable.h"
#include "records/rounding_band.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <vector>

namespace qeval {
namespace {

const nlohmann::json* find_scheme(const nlohmann::json& record, const std::string& name) {
  for (const auto& s : record.at("schemes"))
    if (s.at("name") == name) return &s;
  return nullptr;
}

// The execution path as one word for the table ("kernel", "reference", "fp32") and, when the
// record gives one ("reference (<why>)"), the reason, which goes in a footnote (the record keeps
// the full text).
struct Execution {
  std::string word, reason;
};

Execution execution_of(const nlohmann::json& scheme) {
  const auto& d = scheme.at("description");
  if (!d.is_object() || !d.contains("execution") || !d["execution"].is_string()) return {"fp", ""};
  const std::string e = d["execution"].get<std::string>();
  const auto open = e.find(" (");
  if (open == std::string::npos || e.back() != ')') return {e.substr(0, open), ""};
  return {e.substr(0, open), e.substr(open + 2, e.size() - open - 3)};
}

// " ± 0.00082" (with " ⚠" when it exceeds the se), or "" when the scheme has no band.
std::string band_cell(const nlohmann::json& record, const nlohmann::json& scheme, bool& exceeds_se) {
  const std::optional<RoundingBand> band = rounding_band(record, scheme.at("name").get<std::string>());
  if (!band) return "";
  const double se = scheme.at("vs_full").at("paired_dnll_se").get<double>();
  const bool exceeds = band->delta_nll_sd > se;
  exceeds_se = exceeds_se || exceeds;
  return fmt::format(" ± {:.5f}{}", band->delta_nll_sd, exceeds ? " ⚠" : "");
}

}  // namespace

std::string scheme_table_markdown(const nlohmann::json& record) {
  // With a rounding band (records/rounding_band.h) the ΔNLL cell gains its band: "ΔNLL ± se
  // (sampling) ± band (rounding)", flagged where the band exceeds the se; the variants themselves
  // are not rows.
  bool any_band = false;
  for (const auto& s : record.at("schemes")) any_band = any_band || is_rounding_variant(s);
  std::string out = fmt::format(
      "| scheme | execution | PPL | ± | ΔPPL | ΔPPL % | paired ΔNLL ± se{} | KL(full‖q) | top-1 agree | Δp(correct) | tok/s |\n"
      "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      any_band ? " ± band" : "");
  std::vector<std::string> footnotes;  // one per scheme that runs a path chosen for a reason
  const bool full_finite = finite_ppl(record.at("schemes").front());
  bool band_exceeds_se = false;
  for (const auto& s : record.at("schemes")) {
    if (is_rounding_variant(s)) continue;
    const auto& p = s.at("perplexity");
    auto [execution, why] = execution_of(s);
    if (!why.empty()) {
      footnotes.push_back(fmt::format("[{}] {}: {}", footnotes.size() + 1, s.at("name").get<std::string>(), why));
      execution += fmt::format(" [{}]", footnotes.size());
    }
    const auto& v = s.at("vs_full");
    const bool is_full = &s == &record.at("schemes").front();
    // A comparison with full precision means nothing when either perplexity is not a number:
    // no Δ, no agreement, no KL beside NaN.
    const bool compared = !is_full && full_finite && finite_ppl(s);
    auto cell = [&](const char* key, const char* format, double scale = 1) {
      if (!compared) return std::string("—");
      const nlohmann::json& x = v.at(key);
      if (!x.is_number() || !std::isfinite(x.get<double>())) return std::string("not finite");
      return fmt::format(fmt::runtime(format), scale * x.get<double>());
    };
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", markdown_cell(s.at("name").get<std::string>()),
                       markdown_cell(execution), finite_ppl(s) ? table_number(p.at("ppl"), 4) : "**not finite**",
                       finite_ppl(s) ? table_number(p.at("ppl_pm"), 4) : "—", cell("dppl", "{:+.4f}"),
                       cell("dppl_rel", "{:+.2f}", 100),
                       compared && v.at("paired_dnll_mean").is_number() && v.at("paired_dnll_se").is_number()
                           ? fmt::format("{:+.5f} ± {:.5f}", v.at("paired_dnll_mean").get<double>(),
                                         v.at("paired_dnll_se").get<double>()) +
                                 band_cell(record, s, band_exceeds_se)
                           : "—",
                       cell("kl_mean", "{:.5f}"), cell("top1_agreement", "{:.2f}%", 100), cell("dp_correct_mean", "{:+.5f}"),
                       table_number(s.at("timing").at("tokens_per_second"), 0));
  }
  if (!footnotes.empty()) out += "\n" + fmt::format("{}", fmt::join(footnotes, "\n")) + "\n";
  if (any_band)
    out += fmt::format(
        "\nband: the standard deviation of ΔNLL over the scheme and its rounding variants (inputs of its quantised "
        "linears moved by a few ulps; docs/rounding-band.md){}\n",
        band_exceeds_se ? "; ⚠: the rounding band exceeds the sampling se, so a change smaller than the band is not a "
                          "change of the scheme"
                        : "");
  return out;
}

std::string penalty_row_markdown(const nlohmann::json& record) {
  const nlohmann::json* full = find_scheme(record, "full");
  if (!full) full = &record.at("schemes").front();
  auto delta = [&](const char* name) -> std::string {
    const nlohmann::json* s = find_scheme(record, name);
    if (!s) return "—";
    if (!finite_ppl(*full) || !finite_ppl(*s)) return "not finite";
    return table_number(s->at("vs_full").at("dppl"), 4, true);
  };
  std::string out = "| PPL full | coarse Δ | moderate Δ | fine Δ | 4-bit Δ |\n|---:|---:|---:|---:|---:|\n";
  out += fmt::format("| {} | {} | {} | {} | {} |\n",
                     finite_ppl(*full) ? table_number(full->at("perplexity").at("ppl"), 4) : "not finite",
                     delta("int8-coarse"), delta("int8-moderate"), delta("int8-fine"), delta("w4-zeropoint"));
  return out;
}

bool finite_ppl(const nlohmann::json& scheme) {
  const nlohmann::json* p = scheme.is_object() && scheme.contains("perplexity") ? &scheme["perplexity"] : nullptr;
  if (!p || !p->is_object() || !p->contains("ppl")) return false;
  const nlohmann::json& ppl = (*p)["ppl"];
  return ppl.is_number() && std::isfinite(ppl.get<double>()) && ppl.get<double>() > 0;
}

std::string table_number(const nlohmann::json& value, int decimals, bool sign) {
  if (!value.is_number()) return "—";
  const double v = value.get<double>();
  if (!std::isfinite(v)) return "not finite";
  return sign ? fmt::format("{:+.{}f}", v, decimals) : fmt::format("{:.{}f}", v, decimals);
}

std::string statistics_table_markdown(const nlohmann::json& record) {
  std::string rows;
  for (const auto& s : record.at("schemes")) {
    const auto& st = s.at("statistics");
    if (!st.is_object()) continue;
    const auto& h = st.at("hidden");
    const nlohmann::json none;
    const auto& a = st.contains("attention") ? st.at("attention") : none;
    auto att = [&](const char* key, int decimals) { return a.is_object() ? table_number(a.at(key), decimals) : "—"; };
    rows += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", markdown_cell(s.at("name").get<std::string>()),
                        table_number(h.at("kurtosis").at("first"), 1), table_number(h.at("kurtosis").at("rest"), 2),
                        table_number(h.at("max_abs").at("first"), 1), table_number(h.at("max_abs").at("rest"), 2),
                        att("first_attn_pct", 1), att("first_token_share", 3), att("sink_rate_pct", 1),
                        att("entropy", 3));
  }
  if (rows.empty()) return "";
  return "| scheme | kurtosis first | kurtosis rest | max abs first | max abs rest | %first-attn | first-token share | "
         "sink rate % | attn entropy |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n" +
         rows;
}

}  // namespace qeval
