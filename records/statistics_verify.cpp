#include "records/statistics_verify.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "common/error.h"
#include "common/json_integer.h"
#include "common/printable.h"

namespace qeval {
namespace {

using nlohmann::json;

// A record never describes more layers than a model has; a forged n_layers must not make the
// verifier allocate without bound.
constexpr std::int64_t kMaxLayers = 1 << 20;

struct Domain {
  double lo, hi;
  std::string says;  // for the message
};

// Rounding room at the edges: a kurtosis of a two-valued row is 1 up to the float64 moments.
constexpr double kSlack = 1e-9;
const Domain kKurtosis{1 - kSlack, std::numeric_limits<double>::infinity(), "a kurtosis is at least 1"};
const Domain kNonNegative{0, std::numeric_limits<double>::infinity(), "it is at least 0"};
const Domain kRatio{0, 1 + kSlack, "‖x‖∞/‖x‖₂ lies in [0, 1]"};
const Domain kShare{0, 1 + kSlack, "a share lies in [0, 1]"};
const Domain kPercent{0, 100 + kSlack, "a percentage lies in [0, 100]"};

// Entropies over the positions of a window of at most L: [0, log L].
Domain entropy_domain(const StatisticsShape& shape) {
  const double log_l = std::log(static_cast<double>(shape.window));
  return {-kSlack, log_l + kSlack * std::max(1.0, log_l),
          fmt::format("an entropy lies in [0, log L] = [0, {:.6g}] (L = {}, the window length)", log_l, shape.window)};
}

const json& member(const json& j, const char* key, const std::string& where) {
  QEVAL_CHECK(j.is_object() && j.contains(key), "{}: statistics lack \"{}\"", where, key);
  return j[key];
}

// A value as the collector writes it: a number, or null for NaN.
double value_of(const json& v, const std::string& what) {
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  QEVAL_CHECK(v.is_number(), "{} is {}: expected a number or null", what, json_text(v, 60));
  return v.get<double>();
}

std::vector<double> per_layer(const json& list, std::size_t layers, const Domain& d, const std::string& what) {
  QEVAL_CHECK(list.is_array() && list.size() == layers, "{} lists {} layers, the model has {}", what,
              list.is_array() ? std::to_string(list.size()) : json_text(list, 60), layers);
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
              json_text(headline, 60), mean);
}

std::string layer_list(const std::vector<std::int64_t>& layers) {
  if (layers.empty()) return "none";
  return fmt::format("[{}]", fmt::join(layers, ", "));
}

// The layers a section covers: its "layers" list (0-based indices below M, each once, ascending,
// integers), or every layer when it has none and may say so (`all_when_unlisted`: an
// all-attention model's "attention"). `expected`: the model's layers of the section's kind, when
// the record says which they are.
std::vector<std::int64_t> covered_layers(const json& section, std::int64_t M, bool all_when_unlisted,
                                         const std::optional<std::vector<std::int64_t>>& expected, const char* kind,
                                         const std::string& where) {
  std::vector<std::int64_t> layers;
  if (!section.contains("layers")) {
    QEVAL_CHECK(all_when_unlisted, "{} does not say which layers it covers (no \"layers\")", where);
    for (std::int64_t m = 0; m < M; ++m) layers.push_back(m);
  } else {
    const json& list = section["layers"];
    QEVAL_CHECK(list.is_array() && static_cast<std::int64_t>(list.size()) <= M,
                "{}.layers should list at most the model's {} layers (0-based indices), found {}", where, M,
                json_text(list, 60));
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = fmt::format("{}.layers[{}]", where, i);
      const std::int64_t m = json_integer(list[i], at);
      QEVAL_CHECK(m >= 0 && m < M, "{} is {}, but the model has {} layers (0-based)", at, m, M);
      QEVAL_CHECK(layers.empty() || m != layers.back(), "{}.layers lists layer {} twice", where, m);
      QEVAL_CHECK(layers.empty() || m > layers.back(), "{} is {}, after layer {}: qeval lists layers in ascending order",
                  at, m, layers.back());
      layers.push_back(m);
    }
  }
  if (expected)
    QEVAL_CHECK(layers == *expected, "{}{} names layers {}, but the model's {} layers are {}", where,
                section.contains("layers") ? ".layers" : " (no \"layers\": every layer)", layer_list(layers), kind,
                layer_list(*expected));
  return layers;
}

void verify_attention(const json& a, std::size_t layers, const Domain& entropy, const std::string& where) {
  // Each headline with where its per-layer values are (per_layer.<key>, or entropy_per_layer) and its domain.
  struct Statistic {
    const char* headline;
    const char* per_layer;  // inside "per_layer", or a key of its own
    bool nested;
    const Domain& domain;
  };
  for (const Statistic& st : {Statistic{"first_attn_pct", "first_attn_pct", true, kPercent},
                              Statistic{"first_token_share", "first_token_share", true, kShare},
                              Statistic{"sink_rate_pct", "sink_rate_pct", true, kPercent},
                              Statistic{"entropy", "entropy_per_layer", false, entropy}}) {
    const json& list = st.nested ? member(member(a, "per_layer", where), st.per_layer, where + ".per_layer")
                                 : member(a, st.per_layer, where);
    const std::string list_name = where + (st.nested ? ".per_layer." : ".") + st.per_layer;
    headline_is_mean(member(a, st.headline, where), per_layer(list, layers, st.domain, list_name),
                     where + "." + st.headline);
  }
}

std::vector<std::int64_t> layers_of_kind(const std::vector<std::string>& mixers, bool ssm) {
  std::vector<std::int64_t> out;
  for (std::size_t m = 0; m < mixers.size(); ++m)
    if ((mixers[m] != "attention") == ssm) out.push_back(static_cast<std::int64_t>(m));
  return out;
}

}  // namespace

StatisticsShape statistics_shape(const json& record, const std::string& source) {
  StatisticsShape shape;
  const json& protocol = record.at("protocol");
  shape.window = json_integer(protocol.at("seq_len"), source + ": protocol.seq_len");
  QEVAL_CHECK(shape.window >= 1, "{}: protocol.seq_len is {}", source, shape.window);
  shape.every_window_full = !(protocol.contains("name") && protocol["name"] == "stride");
  if (!record.contains("model") || !record["model"].is_object() || !record["model"].contains("config")) return shape;
  const json& config = record["model"]["config"];
  if (!config.is_object() || !config.contains("n_layers")) return shape;
  const std::string at = source + ": model.config";
  const std::int64_t n = json_integer(config["n_layers"], at + ".n_layers");
  QEVAL_CHECK(n >= 1 && n <= kMaxLayers, "{}.n_layers is {}, expected 1 to {}", at, n, kMaxLayers);
  std::vector<std::string> mixers(static_cast<std::size_t>(n), "attention");  // no pattern: every layer attends
  if (config.contains("layer_mixers")) {
    const json& list = config["layer_mixers"];
    QEVAL_CHECK(list.is_array() && static_cast<std::int64_t>(list.size()) == n,
                "{}.layer_mixers should name the mixer of each of the {} layers, found {}", at, n, json_text(list, 60));
    for (std::size_t m = 0; m < list.size(); ++m) {
      QEVAL_CHECK(list[m] == "attention" || list[m] == "mamba" || list[m] == "mamba2",
                  "{}.layer_mixers[{}] is {}: expected \"attention\", \"mamba\" or \"mamba2\"", at, m, json_text(list[m], 60));
      mixers[m] = list[m].get<std::string>();
    }
  }
  shape.layers = n;
  shape.attention_layers = layers_of_kind(mixers, false);
  shape.ssm_layers = layers_of_kind(mixers, true);
  return shape;
}

void verify_statistics_summary(const json& st, const StatisticsShape& shape, const std::string& where) {
  const std::string at = where + ": statistics";
  const std::int64_t layers = json_integer(member(st, "layers", at), at + ".layers");
  QEVAL_CHECK(layers >= 1 && layers <= kMaxLayers && (shape.layers == 0 || layers == shape.layers),
              "{}.layers is {}, but the model has {} layers", at, layers, shape.layers);
  const std::size_t M = static_cast<std::size_t>(layers);
  const json& hidden = member(st, "hidden", at);
  struct Quantity {
    const char* name;
    const Domain& domain;
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
              at, largest.is_array() ? std::to_string(largest.size()) : json_text(largest, 60), M);

  // Which layers each section covers: the model's layers of its kind, each once.
  const bool known = shape.layers > 0;
  const std::optional<std::vector<std::int64_t>> attention_kind =
      known ? std::optional(shape.attention_layers) : std::nullopt;
  const std::optional<std::vector<std::int64_t>> ssm_kind = known ? std::optional(shape.ssm_layers) : std::nullopt;
  const Domain entropy = entropy_domain(shape);
  std::vector<std::int64_t> attention_layers;
  if (st.contains("attention") && st["attention"].is_object()) {
    attention_layers = covered_layers(st["attention"], layers, true, attention_kind, "attention", at + ".attention");
    verify_attention(st["attention"], attention_layers.size(), entropy, at + ".attention");
  }
  std::optional<std::vector<std::int64_t>> ssm_layers;  // as the first SSM section lists them
  auto ssm_section = [&](const char* key) -> const json* {
    if (!st.contains(key) || !st[key].is_object()) return nullptr;
    const std::string sat = at + "." + key;
    std::vector<std::int64_t> listed = covered_layers(st[key], layers, false, ssm_kind, "Mamba / Mamba-2", sat);
    for (std::int64_t m : listed)
      QEVAL_CHECK(!std::binary_search(attention_layers.begin(), attention_layers.end(), m),
                  "{}.layers lists layer {}, which statistics.attention lists as an attention layer", sat, m);
    QEVAL_CHECK(!ssm_layers || listed == *ssm_layers, "{}.layers names layers {}, but the other SSM section names {}",
                sat, layer_list(listed), layer_list(*ssm_layers));
    ssm_layers = listed;
    return &st[key];
  };
  if (const json* implicit = ssm_section("implicit_attention"))
    verify_attention(*implicit, ssm_layers->size(), entropy, at + ".implicit_attention");
  if (const json* sel = ssm_section("selection")) {
    // S is a distribution over a window's positions: entropy_max = log L, every entropy below it.
    const std::string sat = at + ".selection";
    const double most = value_of(member(*sel, "entropy_max", sat), sat + ".entropy_max");
    const double log_l = std::log(static_cast<double>(shape.window));
    auto is_log_of = [](double v, double n) { return std::fabs(v - std::log(n)) <= kSlack * std::max(1.0, std::log(n)); };
    if (shape.every_window_full) {
      QEVAL_CHECK(is_log_of(most, static_cast<double>(shape.window)),
                  "{}.entropy_max is {}, but it is log L = {} for windows of L = {} positions", sat, most, log_l,
                  shape.window);
    } else {  // stride: the shortest window's length, at most L
      const double n = std::isfinite(most) ? std::round(std::exp(std::min(most, 60.0))) : 0;
      QEVAL_CHECK(n >= 1 && n <= static_cast<double>(shape.window) && is_log_of(most, n),
                  "{}.entropy_max is {}, but it is log L' for the shortest window's L' of 1 to {} positions", sat, most,
                  shape.window);
    }
    headline_is_mean(member(*sel, "entropy", sat),
                     per_layer(member(*sel, "entropy_per_layer", sat), ssm_layers->size(), entropy,
                               sat + ".entropy_per_layer"),
                     sat + ".entropy");
  }
}

}  // namespace qeval
