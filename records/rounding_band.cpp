#include "records/rounding_band.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace qeval {
namespace {

double sample_sd(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

double range_of(const std::vector<double>& v) {
  if (v.empty()) return 0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *hi - *lo;
}

// A penalty of a scheme entry; null (NaN) in the record reads as NaN.
double penalty(const nlohmann::json& entry, const char* key) {
  const nlohmann::json& v = entry.at("vs_full").at(key);
  return v.is_number() ? v.get<double>() : std::nan("");
}

}  // namespace

bool is_rounding_variant(const nlohmann::json& scheme_entry) {
  return scheme_entry.contains("description") && scheme_entry.at("description").is_object() &&
         scheme_entry.at("description").contains("rounding_band_of");
}

nlohmann::json RoundingBand::to_json() const {
  return {{"variants", variants},       {"eps", eps},
          {"seeds", seeds},             {"delta_nll", delta_nll},
          {"dppl", dppl},               {"kl", kl},
          {"top1", top1},               {"delta_nll_sd", delta_nll_sd},
          {"delta_nll_range", delta_nll_range}, {"dppl_sd", dppl_sd},
          {"dppl_range", dppl_range},   {"kl_sd", kl_sd},
          {"top1_sd", top1_sd}};
}

std::optional<RoundingBand> rounding_band(const nlohmann::json& record, const std::string& scheme) {
  const nlohmann::json* own = nullptr;
  std::vector<const nlohmann::json*> variants;
  for (const nlohmann::json& s : record.at("schemes")) {
    if (is_rounding_variant(s)) {
      if (s.at("description").at("rounding_band_of") == scheme) variants.push_back(&s);
    } else if (s.at("name") == scheme) {
      own = &s;
    }
  }
  if (variants.empty() || own == nullptr || !own->contains("vs_full") || own->at("vs_full").is_null()) return std::nullopt;
  RoundingBand band;
  band.variants = static_cast<int>(variants.size());
  band.eps = variants.front()->at("description").value("rounding_eps", 0.0);
  for (const nlohmann::json* v : variants) band.seeds.push_back(v->at("description").value("rounding_seed", std::int64_t{0}));
  std::vector<const nlohmann::json*> all{own};
  all.insert(all.end(), variants.begin(), variants.end());
  for (const nlohmann::json* s : all) {
    band.delta_nll.push_back(penalty(*s, "paired_dnll_mean"));
    band.dppl.push_back(penalty(*s, "dppl"));
    band.kl.push_back(penalty(*s, "kl_mean"));
    band.top1.push_back(penalty(*s, "top1_agreement"));
  }
  band.delta_nll_sd = sample_sd(band.delta_nll);
  band.delta_nll_range = range_of(band.delta_nll);
  band.dppl_sd = sample_sd(band.dppl);
  band.dppl_range = range_of(band.dppl);
  band.kl_sd = sample_sd(band.kl);
  band.top1_sd = sample_sd(band.top1);
  return band;
}

void attach_rounding_bands(nlohmann::json& record) {
  for (nlohmann::json& s : record.at("schemes")) {
    if (is_rounding_variant(s)) continue;
    const std::optional<RoundingBand> band = rounding_band(record, s.at("name").get<std::string>());
    if (band) s["rounding_band"] = band->to_json();
  }
}

}  // namespace qeval
