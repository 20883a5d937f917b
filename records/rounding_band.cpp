#include "records/rounding_band.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/error.h"
#include "common/json_diff.h"
#include "common/json_integer.h"
#include "common/printable.h"

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

// What the jitter adds to a variant's description: its identity.
constexpr const char* kJitterKeys[] = {"rounding_band_of", "rounding_seed", "rounding_eps"};
// What a variant measures on its own jittered forward (a quantised cache's K / V error,
// docs/kv-cache.md).
constexpr const char* kVariantMeasurements[] = {"kv_cache_error"};

// The description without the jitter's keys and the variant's measurements: what a variant
// shares with its scheme.
nlohmann::json without_jitter(nlohmann::json description) {
  if (description.is_object()) {
    for (const char* key : kJitterKeys) description.erase(key);
    for (const char* key : kVariantMeasurements) description.erase(key);
  }
  return description;
}

// A written band summary against the one recomputed: integers exactly, floats to 1e-9 relative (a
// NaN is written as null), the same keys and lengths.
void same_summary(const nlohmann::json& written, const nlohmann::json& recomputed, const std::string& what) {
  auto differs = [&] {
    return fmt::format("{} is {}, but its variants give {}: the band summary was changed after qeval wrote it", what,
                       json_text(written, 80), json_text(recomputed, 80));
  };
  if (recomputed.is_number_float()) {
    const double r = recomputed.get<double>();
    if (std::isnan(r)) {
      QEVAL_CHECK(written.is_null(), "{}", differs());
      return;
    }
    QEVAL_CHECK(written.is_number() && std::fabs(written.get<double>() - r) <= 1e-9 * std::max(1.0, std::fabs(r)), "{}",
                differs());
  } else if (recomputed.is_array()) {
    QEVAL_CHECK(written.is_array() && written.size() == recomputed.size(), "{}", differs());
    for (std::size_t i = 0; i < recomputed.size(); ++i)
      same_summary(written[i], recomputed[i], fmt::format("{}[{}]", what, i));
  } else if (recomputed.is_object()) {
    QEVAL_CHECK(written.is_object(), "{}", differs());
    for (const auto& [key, value] : written.items())
      QEVAL_CHECK(recomputed.contains(key), "{} has \"{}\", which qeval does not write", what, key);
    for (const auto& [key, value] : recomputed.items()) {
      QEVAL_CHECK(written.contains(key), "{} lacks \"{}\": the band summary was changed after qeval wrote it", what, key);
      same_summary(written[key], value, what + "." + key);
    }
  } else {
    QEVAL_CHECK(written == recomputed, "{}", differs());
  }
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

nlohmann::json rounding_identity(const nlohmann::json& scheme_entry) {
  if (!is_rounding_variant(scheme_entry)) return nullptr;
  const nlohmann::json& d = scheme_entry.at("description");
  nlohmann::json id = nlohmann::json::object();
  for (const char* key : kJitterKeys) id[key] = d.contains(key) ? d[key] : nlohmann::json(nullptr);
  return id;
}

void verify_rounding_bands(const nlohmann::json& record, const std::string& source) {
  const nlohmann::json& schemes = record.at("schemes");
  std::map<std::string, const nlohmann::json*> scheme_of;  // the entries that are no variant, by name
  for (const nlohmann::json& s : schemes)
    if (!is_rounding_variant(s)) scheme_of[s.at("name").get<std::string>()] = &s;
  const std::string reference = schemes.at(0).at("name").get<std::string>();

  // One run jitters with one ε: the first jitter met sets it, every other must have it.
  std::string eps_from;
  double run_eps = 0;
  auto jitter_of = [&](const nlohmann::json& description, const std::string& where, const std::string& name) {
    const std::int64_t seed = json_integer(description.at("rounding_seed"), where + ": description.rounding_seed");
    QEVAL_CHECK(seed >= 1, "{}: description.rounding_seed is {}: rounding seeds start at 1", where, seed);
    const nlohmann::json& e = description.at("rounding_eps");
    QEVAL_CHECK(e.is_number() && e.get<double>() > 0 && e.get<double>() < 1e-3,
                "{}: description.rounding_eps is {}: expected a relative perturbation in (0, 1e-3)", where, json_text(e, 60));
    const double eps = e.get<double>();
    if (eps_from.empty()) {
      eps_from = name;
      run_eps = eps;
    }
    QEVAL_CHECK(eps == run_eps, "{}: description.rounding_eps is {}, but scheme {} has {}: one run jitters with one ε "
                "(--rounding-band-eps)", where, eps, eps_from, run_eps);
    return seed;
  };

  std::map<std::string, std::set<std::int64_t>> seeds;  // each scheme's variants' seeds
  for (const nlohmann::json& s : schemes) {
    const std::string name = s.at("name").get<std::string>();
    const std::string where = fmt::format("{}: scheme {}", source, name);
    const nlohmann::json& d = s.at("description");
    if (!is_rounding_variant(s)) {
      // --rounding-seed S: the scheme itself evaluated as another valid implementation.
      if (d.is_object() && (d.contains("rounding_seed") || d.contains("rounding_eps"))) jitter_of(d, where, name);
      continue;
    }
    const nlohmann::json& of = d.at("rounding_band_of");
    QEVAL_CHECK(of.is_string(), "{}: description.rounding_band_of is {}: expected the name of the scheme it varies", where,
                json_text(of, 60));
    const std::string base = of.get<std::string>();
    const auto it = scheme_of.find(base);
    QEVAL_CHECK(it != scheme_of.end(), "{}: description.rounding_band_of is {}, which is no scheme of the record: a "
                "rounding variant belongs to a scheme evaluated beside it", where, in_quotes(base));
    QEVAL_CHECK(base != reference, "{}: description.rounding_band_of is {}, the reference the penalties are measured "
                "against: full precision has no rounding band", where, in_quotes(base));
    const std::int64_t seed = jitter_of(d, where, name);
    QEVAL_CHECK(seeds[base].insert(seed).second, "{}: rounding_seed {} is also that of another rounding variant of {}: "
                "each variant has its own seed", where, seed, base);
    QEVAL_CHECK(name == fmt::format("{}~r{}", base, seed), "{}: a rounding variant of {} with rounding_seed {} is named "
                "{}~r{}", where, base, seed, base, seed);
    const nlohmann::json& own = it->second->at("description");
    QEVAL_CHECK(!own.is_object() || !own.contains("rounding_seed") || own["rounding_seed"] != seed,
                "{}: rounding_seed {} is the seed scheme {} itself was evaluated with (--rounding-seed)", where, seed, base);
    const auto differ = json_differences(without_jitter(own), without_jitter(d), 3);
    QEVAL_CHECK(differ.empty(), "{}: description differs from that of {}, the scheme it is a rounding variant of ({}): a "
                "variant is its scheme with jittered inputs", where, base, fmt::format("{}", fmt::join(differ, "; ")));
    QEVAL_CHECK(s.value("linear_weight_bytes", nlohmann::json(nullptr)) ==
                    it->second->value("linear_weight_bytes", nlohmann::json(nullptr)),
                "{}: linear_weight_bytes differs from that of {}, the scheme it is a rounding variant of", where, base);
  }

  // Each band summary is the band its variants give, and there is one exactly where there are variants.
  for (const nlohmann::json& s : schemes) {
    if (is_rounding_variant(s)) continue;
    const std::string name = s.at("name").get<std::string>();
    const std::optional<RoundingBand> band = rounding_band(record, name);
    const bool written = s.contains("rounding_band") && !s["rounding_band"].is_null();
    if (!band) {
      QEVAL_CHECK(!written, "{}: scheme {} has a rounding_band, but the record holds no rounding variant of it", source,
                  name);
      continue;
    }
    QEVAL_CHECK(written, "{}: scheme {} has {} rounding variants, but no rounding_band: the band summary was removed "
                "after qeval wrote it", source, name, band->variants);
    same_summary(s["rounding_band"], band->to_json(), fmt::format("{}: scheme {}: rounding_band", source, name));
  }
}

}  // namespace qeval
