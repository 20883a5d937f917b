#include "reports/token_tails.h"

#include <fmt/format.h>

#include <map>

#include "common/printable.h"
#include "records/rounding_band.h"

namespace qeval {

namespace {

double num(const nlohmann::json& j, const char* key) { return j.at(key).get<double>(); }

// The percentile lines llama.cpp prints, in its order, with its labels (KL leaves out 75 and 25).
struct Line {
  const char* key;
  const char* label;
  bool kl;
};
const std::vector<Line>& lines() {
  static const std::vector<Line> l = {{"max", "Maximum", true}, {"p99.9", "99.9%  ", true}, {"p99", "99.0%  ", true},
                                      {"p95", "95.0%  ", true},  {"p90", "90.0%  ", true},   {"p75", "75.0%  ", false},
                                      {"median", "Median ", true}, {"p25", "25.0%  ", false}, {"p10", "10.0%  ", true},
                                      {"p5", " 5.0%  ", true},   {"p1", " 1.0%  ", true},    {"p0.1", " 0.1%  ", true},
                                      {"min", "Minimum", true}};
  return l;
}

std::string block(const nlohmann::json& t) {
  const auto& kl = t.at("kl");
  const auto& dp = t.at("dp");
  std::string out = "====== KL divergence statistics ======\n";
  out += fmt::format("Mean    KLD: {:10.6f} ± {:10.6f}\n", num(kl, "mean"), num(kl, "uncertainty"));
  if (kl.contains("percentiles"))
    for (const Line& l : lines())
      if (l.kl) out += fmt::format("{} KLD: {:10.6f}\n", l.label, num(kl.at("percentiles"), l.key));
  const auto& rkl = t.at("reverse_kl");
  out += fmt::format("Reverse KLD: {:10.6f} ± {:10.6f}   (KL(q ‖ full), qeval)\n", num(rkl, "mean"), num(rkl, "uncertainty"));
  out += "\n====== Token probability statistics ======\n";
  out += fmt::format("Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100 * num(dp, "mean"), 100 * num(dp, "uncertainty"));
  if (dp.contains("percentiles"))
    for (const Line& l : lines()) out += fmt::format("{} Δp: {:6.3f}%\n", l.label, 100 * num(dp.at("percentiles"), l.key));
  const auto& rms = t.at("dp_rms");
  out += fmt::format("RMS Δp    : {:6.3f} ± {:5.3f} %\n", 100 * num(rms, "value"), 100 * num(rms, "uncertainty"));
  const auto& top = t.at("same_top");
  out += fmt::format("Same top p: {:6.3f} ± {:5.3f} %\n", 100 * num(top, "rate"), 100 * num(top, "uncertainty"));
  const auto& lost = t.at("top1_flips").at("lost");
  const auto& gained = t.at("top1_flips").at("gained");
  out += fmt::format("Top-1 flips: full right → q wrong {:6.3f} ± {:5.3f} % ({}), q right → full wrong {:6.3f} ± {:5.3f} % ({})\n",
                     100 * num(lost, "rate"), 100 * num(lost, "uncertainty"), lost.at("count").get<std::int64_t>(),
                     100 * num(gained, "rate"), 100 * num(gained, "uncertainty"), gained.at("count").get<std::int64_t>());
  if (!kl.contains("percentiles")) out += "(no percentiles: the per-token values were not kept for this record)\n";
  return out;
}

}  // namespace

std::string kl_divergence_blocks_markdown(const std::vector<LabeledRecord>& records) {
  std::string out;
  for (const auto& r : records)
    for (const auto& s : r.record.at("schemes")) {
      if (is_rounding_variant(s) || !s.contains("per_token")) continue;
      out += fmt::format("\n{} vs full precision, {} ({} tokens; llama-perplexity --kl-divergence layout)\n\n```\n{}```\n",
                         s.at("name").get<std::string>(), r.label, s["per_token"].at("tokens").get<std::int64_t>(),
                         block(s["per_token"]));
    }
  return out.empty() ? "" : "\nPer-token comparison with full precision (docs/record.md#per_token)\n" + out;
}

std::string position_buckets_markdown(const std::vector<LabeledRecord>& records) {
  std::string out;
  for (const auto& r : records) {
    std::vector<const nlohmann::json*> schemes;
    std::map<std::string, std::int64_t> tokens;  // label → tokens (the same windows for every scheme)
    std::vector<std::string> labels;
    for (const auto& s : r.record.at("schemes")) {
      if (is_rounding_variant(s) || !s.contains("position_buckets")) continue;
      schemes.push_back(&s);
      for (const auto& b : s["position_buckets"]) {
        const std::string label = b.at("label").get<std::string>();
        if (tokens.emplace(label, b.at("tokens").get<std::int64_t>()).second) labels.push_back(label);
      }
    }
    if (schemes.empty()) continue;
    out += fmt::format("\n{}: paired ΔNLL ± se and mean KL by prediction position (0: the first token)\n\n| positions | tokens |",
                       markdown_cell(r.label));
    std::string rule = "|---|---:|";
    for (const auto* s : schemes) {
      const std::string name = markdown_cell(s->at("name").get<std::string>());
      out += fmt::format(" {} ΔNLL ± se | {} KL |", name, name);
      rule += "---:|---:|";
    }
    out += "\n" + rule + "\n";
    for (const std::string& label : labels) {
      out += fmt::format("| {} | {} |", label, tokens[label]);
      for (const auto* s : schemes) {
        const nlohmann::json* found = nullptr;
        for (const auto& b : s->at("position_buckets"))
          if (b.at("label") == label) found = &b;
        out += found ? fmt::format(" {:+.5f} ± {:.5f} | {:.5f} |", num(*found, "paired_dnll_mean"),
                                   num(*found, "paired_dnll_se"), num(*found, "kl_mean"))
                     : std::string(" — | — |");
      }
      out += "\n";
    }
  }
  return out;
}

nlohmann::json tails_json(const std::vector<LabeledRecord>& records) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : records)
    for (const auto& s : r.record.at("schemes")) {
      if (is_rounding_variant(s) || !(s.contains("per_token") || s.contains("position_buckets"))) continue;
      out.push_back({{"model", r.label},
                     {"record", r.source},
                     {"scheme", s.at("name")},
                     {"per_token", s.value("per_token", nlohmann::json(nullptr))},
                     {"position_buckets", s.value("position_buckets", nlohmann::json(nullptr))}});
    }
  return out;
}

}  // namespace qeval
