#include "eval/percentiles.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/json_integer.h"

namespace qeval {

const std::vector<PercentileLevel>& percentile_levels() {
  static const std::vector<PercentileLevel> levels = {
      {0.999, "p99.9"}, {0.99, "p99"}, {0.95, "p95"}, {0.90, "p90"}, {0.75, "p75"}, {0.5, "median"},
      {0.25, "p25"},    {0.10, "p10"}, {0.05, "p5"},  {0.01, "p1"},  {0.001, "p0.1"}};
  return levels;
}

double sorted_percentile(const std::vector<double>& v, double fraction) {
  QEVAL_CHECK(!v.empty(), "percentile: no values");
  if (fraction <= 0) return v.front();
  if (fraction >= 1) return v.back();
  double p = fraction * static_cast<double>(v.size() - 1);
  const auto i = static_cast<std::size_t>(p);
  p -= static_cast<double>(i);
  return (1 - p) * v[i] + p * v[std::min(i + 1, v.size() - 1)];
}

double sorted_median(const std::vector<double>& v) {
  QEVAL_CHECK(!v.empty(), "median: no values");
  const std::size_t n = v.size();
  return n % 2 == 0 ? 0.5 * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
}

namespace {

// The order statistics the rule reads for n values, ascending and unique.
std::vector<std::int64_t> needed_ranks(std::int64_t n) {
  std::vector<std::int64_t> ranks = {0, n - 1, n / 2};
  if (n % 2 == 0) ranks.push_back(n / 2 - 1);
  for (const PercentileLevel& l : percentile_levels()) {
    const auto i = static_cast<std::int64_t>(l.fraction * static_cast<double>(n - 1));
    ranks.push_back(i);
    ranks.push_back(std::min(i + 1, n - 1));
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

// The rule over a function giving the sorted value at a rank.
template <class At>
Distribution apply_rule(std::int64_t n, const At& at) {
  Distribution d;
  d.count = n;
  d.min = at(0);
  d.max = at(n - 1);
  d.median = n % 2 == 0 ? 0.5 * (at(n / 2) + at(n / 2 - 1)) : at(n / 2);
  for (const PercentileLevel& l : percentile_levels()) {
    if (l.fraction == 0.5) {
      d.at.push_back(d.median);
      continue;
    }
    double p = l.fraction * static_cast<double>(n - 1);
    const auto i = static_cast<std::int64_t>(p);
    p -= static_cast<double>(i);
    d.at.push_back((1 - p) * at(i) + p * at(std::min(i + 1, n - 1)));
  }
  return d;
}

// −0 and +0 are one value; the selection orders bit patterns, so both paths use +0.
double canonical(double x) { return x + 0.0; }

// An unsigned key whose order is the order of the (finite) doubles.
std::uint64_t order_key(double x) {
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return (bits >> 63) ? ~bits : bits | (std::uint64_t{1} << 63);
}

double from_order_key(std::uint64_t key) {
  const std::uint64_t bits = (key >> 63) ? key & ~(std::uint64_t{1} << 63) : ~key;
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

}  // namespace

Distribution distribution_of(std::vector<double> values) {
  if (values.empty()) return {};
  for (double& x : values) {
    QEVAL_CHECK(std::isfinite(x), "percentiles: a value is {}: every per-token value must be finite", x);
    x = canonical(x);
  }
  std::sort(values.begin(), values.end());
  return apply_rule(static_cast<std::int64_t>(values.size()),
                    [&](std::int64_t r) { return values[static_cast<std::size_t>(r)]; });
}

Distribution streamed_distribution(const ValueSource& source) {
  std::int64_t n = 0;
  source([&](const double* x, std::size_t m) {
    for (std::size_t i = 0; i < m; ++i)
      QEVAL_CHECK(std::isfinite(x[i]), "percentiles: value {} is {}: every per-token value must be finite",
                  n + static_cast<std::int64_t>(i), x[i]);
    n += static_cast<std::int64_t>(m);
  });
  if (n == 0) return {};
  // Per wanted rank: the key's bits found so far and the rank left inside the values sharing them.
  struct Wanted {
    std::int64_t rank, left;
    std::uint64_t prefix = 0;
  };
  std::vector<Wanted> wanted;
  for (std::int64_t r : needed_ranks(n)) wanted.push_back({r, r});
  constexpr int kDigit = 16;
  constexpr std::size_t kBuckets = std::size_t{1} << kDigit;
  for (int shift = 64 - kDigit; shift >= 0; shift -= kDigit) {
    // One histogram of the next digit per distinct prefix (at most one per wanted rank).
    std::vector<std::uint64_t> prefixes;
    for (const Wanted& w : wanted) prefixes.push_back(w.prefix);
    std::sort(prefixes.begin(), prefixes.end());
    prefixes.erase(std::unique(prefixes.begin(), prefixes.end()), prefixes.end());
    std::vector<std::vector<std::int64_t>> counts(prefixes.size(), std::vector<std::int64_t>(kBuckets, 0));
    const int high = shift + kDigit;  // bits above the digit: the prefix (none on the first pass)
    source([&](const double* x, std::size_t m) {
      for (std::size_t i = 0; i < m; ++i) {
        const std::uint64_t key = order_key(canonical(x[i]));
        const std::uint64_t prefix = high >= 64 ? 0 : key >> high;
        const auto it = std::lower_bound(prefixes.begin(), prefixes.end(), prefix);
        if (it == prefixes.end() || *it != prefix) continue;
        counts[static_cast<std::size_t>(it - prefixes.begin())][(key >> shift) & (kBuckets - 1)] += 1;
      }
    });
    for (Wanted& w : wanted) {
      const auto& c = counts[static_cast<std::size_t>(std::lower_bound(prefixes.begin(), prefixes.end(), w.prefix) -
                                                      prefixes.begin())];
      std::size_t digit = 0;
      while (w.left >= c[digit]) w.left -= c[digit++];  // the rank lies in this digit's bucket
      w.prefix = (w.prefix << kDigit) | digit;
    }
  }
  return apply_rule(n, [&](std::int64_t r) {
    const auto it = std::find_if(wanted.begin(), wanted.end(), [&](const Wanted& w) { return w.rank == r; });
    QEVAL_CHECK(it != wanted.end(), "percentiles: rank {} of {} was not selected", r, n);
    return from_order_key(it->prefix);
  });
}

nlohmann::json Distribution::to_json() const {
  nlohmann::json j = {{"count", count}, {"max", max}};
  for (std::size_t k = 0; k < percentile_levels().size() && k < at.size(); ++k) j[percentile_levels()[k].name] = at[k];
  j["min"] = min;
  return j;
}

Distribution Distribution::from_json(const nlohmann::json& j, const std::string& where) {
  QEVAL_CHECK(j.is_object(), "{}: expected a distribution object, found {}", where, j.dump());
  Distribution d;
  auto number = [&](const char* key) {
    QEVAL_CHECK(j.contains(key) && j[key].is_number() && std::isfinite(j[key].get<double>()),
                "{}: \"{}\" should be a finite number", where, key);
    return j[key].get<double>();
  };
  d.count = json_integer(j.at("count"), where + ": count");
  d.max = number("max");
  d.min = number("min");
  for (const PercentileLevel& l : percentile_levels()) d.at.push_back(number(l.name));
  d.median = number("median");
  return d;
}

}  // namespace qeval
