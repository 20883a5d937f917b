// A scheme's rounding band in a record (issue 53; eval/rounding_band.h makes the variants). The
// variants are ordinary scheme entries whose description names the scheme they vary
// ("rounding_band_of"), so their numbers are verified against their per-window rows like any
// scheme's (records/record_verify.h). The band is computed from those entries, never read from a
// summary: over the scheme itself and its K variants (K + 1 equally valid implementations), the
// sample standard deviation and the range of each penalty.
//
// In the record, each such scheme gets
//   "rounding_band": {"variants": K, "eps": ε, "seeds": [...],
//                     "delta_nll": [scheme's, variants'...], "dppl": [...], "kl": [...], "top1": [...],
//                     "delta_nll_sd", "delta_nll_range", "dppl_sd", "dppl_range", "kl_sd", "top1_sd"}
// (written for readers; reports recompute it with rounding_band()).
//
// A band widens a gate (`check`'s "band": k), so a record's variants are verified before any reader
// uses them (verify_rounding_bands, called by records/record_verify.h's verify_record): each names
// a quantised scheme of its record ("rounding_band_of"), is named "<scheme>~r<seed>" with a seed
// ≥ 1 (so seeds are distinct), and holds its scheme's description but for the jitter; every
// jitter of the record (variants, and schemes evaluated with --rounding-seed) has the one ε of the
// run, in (0, 1e-3); and each "rounding_band" summary is the one its variants give (1e-9
// relative), present exactly where there are variants.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace qeval {

// Whether a record's scheme entry is a rounding variant (reports list it under its scheme only).
bool is_rounding_variant(const nlohmann::json& scheme_entry);

struct RoundingBand {
  int variants = 0;
  double eps = 0;
  std::vector<std::int64_t> seeds;                // the variants'
  std::vector<double> delta_nll, dppl, kl, top1;  // the scheme's own first, then each variant's
  double delta_nll_sd = 0, delta_nll_range = 0, dppl_sd = 0, dppl_range = 0, kl_sd = 0, top1_sd = 0;
  nlohmann::json to_json() const;
};

// The band of `scheme` from the record's variant entries; nullopt when it has none.
std::optional<RoundingBand> rounding_band(const nlohmann::json& record, const std::string& scheme);

// Writes "rounding_band" into every scheme entry that has variants.
void attach_rounding_bands(nlohmann::json& record);

// Throws qeval::Error naming `source`, the scheme and the key that disagrees (see above). The
// record's schemes and their vs_full numbers are expected to be verified already.
void verify_rounding_bands(const nlohmann::json& record, const std::string& source);

// What makes a variant the variant it is, for comparing two records' schemes of one name:
// {"rounding_band_of", "rounding_seed", "rounding_eps"}; null for an entry that is no variant.
nlohmann::json rounding_identity(const nlohmann::json& scheme_entry);

}  // namespace qeval
