// Exact percentiles of per-token values by llama.cpp's rule (tools/perplexity/perplexity.cpp,
// `llama-perplexity --kl-divergence`), over any number of values with bounded memory.
//
// The rule, on the n values sorted ascending v[0] ≤ … ≤ v[n − 1]:
//   percentile(f) = v[0] for f ≤ 0, v[n − 1] for f ≥ 1, else with p = f·(n − 1), i = ⌊p⌋, w = p − i:
//                   (1 − w)·v[i] + w·v[min(i + 1, n − 1)]
//   median        = v[n/2] for odd n, 0.5·(v[n/2] + v[n/2 − 1]) for even n
// qeval evaluates it in float64 with the decimal fractions; llama.cpp keeps its values, f and p in
// float32, so its numbers differ from these by float32 rounding only (tests/oracle/percentiles_oracle.py
// computes both).
//
// Only the order statistics the rule reads are needed (two per fraction), so the values need not
// be held at once: `streamed_distribution` finds them by an exact radix selection over the bits
// of the float64 values, four passes over a source that can be read again (a file), 16 bits per
// pass, and the same numbers as sorting in memory (`distribution_of`), bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qeval {

// The fractions llama.cpp prints for Δp (for KL the same without 0.75 and 0.25), high to low,
// with their record names ("p99.9" … "p0.1"; 0.5 is "median").
struct PercentileLevel {
  double fraction;
  const char* name;
};
const std::vector<PercentileLevel>& percentile_levels();

struct Distribution {
  std::int64_t count = 0;
  double min = 0, max = 0, median = 0;
  std::vector<double> at;  // percentile_levels()[k] at k (the median's slot holds the median)
  nlohmann::json to_json() const;  // {"count", "max", "p99.9", …, "median", …, "p0.1", "min"}
  static Distribution from_json(const nlohmann::json& j, const std::string& where);
};

// The rule on values already sorted ascending (n ≥ 1).
double sorted_percentile(const std::vector<double>& sorted, double fraction);
double sorted_median(const std::vector<double>& sorted);

// In memory: sorts a copy. Every value must be finite.
Distribution distribution_of(std::vector<double> values);

// Calls `visit` on every value once, in chunks, the same values in the same order on every call.
using ValueChunk = std::function<void(const double* values, std::size_t n)>;
using ValueSource = std::function<void(const ValueChunk& visit)>;

// Exact selection over a source read four or five times; memory independent of the count.
Distribution streamed_distribution(const ValueSource& source);

}  // namespace qeval
