// A quantised scheme against full precision over all scored tokens, as llama.cpp's
// `llama-perplexity --kl-divergence` states it (tools/perplexity/perplexity.cpp), and beside it the
// reverse KL and the top-1 flips (issue 80, item 1).
//
// llama.cpp's uncertainty of a mean from Σx, Σx² over n tokens (its mean_and_uncertainty):
//   f = Σx / n,  u = sqrt((Σx²/n − f²) / (n − 1)) when that variance is > 0 and n > 10, else 0
// and from it
//   KL ± u(ΣKL, ΣKL²),  reverse KL ± u,  Δp ± u(ΣΔp, ΣΔp²),
//   RMS Δp = sqrt(mean Δp²) ± 0.5 / RMS · u(ΣΔp², ΣΔp⁴),
//   same top p = agreeing / n ± sqrt(p (1 − p) / (n − 1)),
// and for each kind of flip (lost: full precision's top-1 is the target and the scheme's is not;
// gained: the reverse) its rate ± sqrt(r (1 − r) / (n − 1)), as same top p's.
// The overlap Σ min(p_full, p_scheme) is not computed (eval/vocab_scoring.h says why).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "eval/percentiles.h"
#include "eval/token_scores.h"

namespace qeval {

struct ValueAndUncertainty {
  double value = 0, uncertainty = 0;
};

// llama.cpp's mean_and_uncertainty.
ValueAndUncertainty llama_mean_and_uncertainty(double sum, double sum2, std::int64_t count);
// A rate k / n ± sqrt(r (1 − r) / (n − 1)).
ValueAndUncertainty rate_and_uncertainty(std::int64_t k, std::int64_t n);

struct FidelitySummary {
  std::int64_t tokens = 0;
  ValueAndUncertainty kl, reverse_kl, dp, dp_rms, same_top, top1_lost, top1_gained;
  std::int64_t lost = 0, gained = 0;
  // {"tokens", "kl": {"mean", "uncertainty"}, "reverse_kl", "dp", "dp_rms": {"value", …}, "same_top": {"rate", …},
  //  "top1_flips": {"lost": {"count", "rate", "uncertainty"}, "gained"}}; the distributions join "kl" and "dp".
  nlohmann::json to_json(const std::optional<Distribution>& kl_values, const std::optional<Distribution>& dp_values) const;
};

// Over the rows in ascending window order; none when a row has no tails (full precision's rows
// have zero sums and give a summary of zeros, which records leave out).
std::optional<FidelitySummary> summarize_fidelity(const std::map<std::int64_t, WindowScores>& rows);

}  // namespace qeval
