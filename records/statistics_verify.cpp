#include "records/statistics_verify.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "common/json_integer.h"

namespace qeval {
namespace {

using nlohmann::json;

struct Domain {
  double lo, hi;
  const char* says;  // for the message
};

// Rounding room at the edges: a kurtosis of a two-valued row is 1 up to the float64 moments.
constexpr double kSlack = 1e-9;
constexpr Domain kKurtosis{1 - kSlack, std::numeric_limits<double>::infinity(), "a kurtosis is at least 1"};
constexpr Domain kNonNegative{0, std::numeric_limits<double>::infinity(), "it is at least 0"};
constexpr Domain kRatio{0, 1 + kSlack, "‖x‖∞/‖x‖₂ lies in [0, 1]"};
constexpr Domain kShare{0, 1 + kSlack, "a share lies in [0, 1]"};
constexpr Domain kPercent{0, 100 + kSlack, "a percentage lies in [0, 100]"};
constexpr Domain kEntropy{-kSlack, std::numeric_limits<double>::infinity(), "an entropy is at least 0"};

const json& member(const json& j, const char* key, const std::string& where) {
  QEVAL_CHECK(j.is_object() && j.contains(key), "{}: statistics lack \"{}\"", where, key);
  return j[key];
}

// A value as the collector writes it: a number, or null for NaN.
double value_of(const json& v, const std::string& what) {
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  QEVAL_CHECK(v.is_number(), "{} is {}: expected a number or null", what, v.dump());
  return v.get<double>();
}

std::vector<double> per_layer(const json& list, std::size_t layers, const Domain& d, const std::string& what) {
  QEVAL_CHECK(list.is_array() && list.size() == layers, "{} lists {} layers, the model has {}", what,
              list.is_array() ? std::to_string(list.size()) : list.dump(), layers);
  std::vector<double> out;
  for (std::size_t m = 0; m < list.size(); ++m) {
    const std::string at = what + "[" + std::to_string(m) + "]";
    const double v = value_of(list[m], at);
    QEVAL_CHECK(std::isnan(v) || (v >= d.lo && v <= d.hi), "{} is {}, but {}", at, v, d.says);
    out.push_back(v);
  }
  return out;
}

// The headline as the collector computes it: the per-layer values summed in order, over their count.
void headline_is_mean(const json& headline, const std::vector<double>& values, const std::string& what) {
  double sum = 0;
  for (double v : values) sum += v;
  const double mean = values.empty() ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(values.size());
  const double written = value_of(headline, what);
  if (std::isnan(mean)) {
    QEVAL_CHECK(std::isnan(written), "{} is {}, but its per-layer values give no number (a layer without one)", what,
                written);
    return;
  }
  QEVAL_CHECK(std::fabs(written - mean) <= kSlack * std::max(1.0, std::fabs(mean)),
              "{} is {}, but the mean of its per-layer values is {}: the summary was changed after qeval wrote it", what,
              headline.dump(), mean);
}

// The layers a section covers: its own "layers" list when it has one, else all of them.
std::size_t section_layers(const json& section, std::size_t all, const std::string& where) {
  if (!section.contains("layers")) return all;
  QEVAL_CHECK(section["layers"].is_array() && section["layers"].size() <= all,
              "{}.layers should list at most the model's {} layers", where, all);
  return section["layers"].size();
}

void verify_attention(const json& a, std::size_t layers, const std::string& where) {
  // Each headline with where its per-layer values are (per_layer.<key>, or entropy_per_layer) and its domain.
  struct Statistic {
    const char* headline;
    const char* per_layer;  // inside "per_layer", or a key of its own
    bool nested;
    Domain domain;
  };
  for (const Statistic& st : {Statistic{"first_attn_pct", "first_attn_pct", true, kPercent},
                              Statistic{"first_token_share", "first_token_share", true, kShare},
                              Statistic{"sink_rate_pct", "sink_rate_pct", true, kPercent},
                              Statistic{"entropy", "entropy_per_layer", false, kEntropy}}) {
    const json& list = st.nested ? member(member(a, "per_layer", where), st.per_layer, where + ".per_layer")
                                 : member(a, st.per_layer, where);
    const std::string list_name = where + (st.nested ? ".per_layer." : ".") + st.per_layer;
    headline_is_mean(member(a, st.headline, where), per_layer(list, layers, st.domain, list_name),
                     where + "." + st.headline);
  }
}

}  // namespace

void verify_statistics_summary(const json& st, std::int64_t model_layers, const std::string& where) {
  const std::string at = where + ": statistics";
  const std::int64_t layers = json_integer(member(st, "layers", at), at + ".layers");
  QEVAL_CHECK(layers >= 1 && (model_layers == 0 || layers == model_layers),
              "{}.layers is {}, but the model has {} layers", at, layers, model_layers);
  const std::size_t M = static_cast<std::size_t>(layers);
  const json& hidden = member(st, "hidden", at);
  struct Quantity {
    const char* name;
    Domain domain;
  };
  for (const Quantity& q : {Quantity{"kurtosis", kKurtosis}, Quantity{"max_abs", kNonNegative}, Quantity{"inf_over_l2", kRatio}}) {
    const std::string qat = at + ".hidden." + q.name;
    const json& section = member(hidden, q.name, at + ".hidden");
    const json& pl = member(section, "per_layer", qat);
    for (const char* part : {"first", "rest"})
      headline_is_mean(member(section, part, qat), per_layer(member(pl, part, qat), M, q.domain, qat + ".per_layer." + part),
                       qat + "." + part);
  }
  const json& largest = member(hidden, "largest_per_layer", at + ".hidden");
  QEVAL_CHECK(largest.is_array() && largest.size() == M, "{}.hidden.largest_per_layer lists {} layers, the model has {}",
              at, largest.is_array() ? std::to_string(largest.size()) : largest.dump(), M);
  if (st.contains("attention") && st["attention"].is_object())
    verify_attention(st["attention"], section_layers(st["attention"], M, at + ".attention"), at + ".attention");
  if (st.contains("implicit_attention") && st["implicit_attention"].is_object())
    verify_attention(st["implicit_attention"], section_layers(st["implicit_attention"], M, at + ".implicit_attention"),
                     at + ".implicit_attention");
  if (st.contains("selection") && st["selection"].is_object()) {
    // A selection entropy lies in [0, log L]: S is a distribution over the window's L positions.
    const json& sel = st["selection"];
    const std::string sat = at + ".selection";
    const double most = value_of(member(sel, "entropy_max", sat), sat + ".entropy_max");
    QEVAL_CHECK(most >= 0, "{}.entropy_max is {}, but it is log L of a window of L ≥ 1 positions", sat, most);
    const Domain selection{-kSlack, most + kSlack * std::max(1.0, most), "a selection entropy lies in [0, entropy_max = log L]"};
    headline_is_mean(member(sel, "entropy", sat),
                     per_layer(member(sel, "entropy_per_layer", sat), section_layers(sel, M, sat), selection,
                               sat + ".entropy_per_layer"),
                     sat + ".entropy");
  }
}

}  // namespace qeval
