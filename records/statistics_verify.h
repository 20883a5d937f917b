// A record's statistics summary held to itself (issue 51): the headline values are the means of
// their per-layer values (stats/statistics.h: "every headline value is the mean over layers of
// the per-layer values"), every per-layer list is as long as the model has layers of its kind,
// and every value lies in its domain — kurtosis ≥ 1, max |x| ≥ 0, ‖x‖∞/‖x‖₂ in [0, 1], shares in
// [0, 1], percentages in [0, 100], entropies ≥ 0 (null: not a number, as the collector writes NaN).
// A forged baseline statistic (a lower kurtosis, a zero sink rate) is refused before a gate reads it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace qeval {

// Throws qeval::Error naming `where` (e.g. "r.json: scheme full") and the value that disagrees.
// `model_layers`: the model's depth from the record's config, or 0 when the record does not say.
void verify_statistics_summary(const nlohmann::json& statistics, std::int64_t model_layers, const std::string& where);

}  // namespace qeval
