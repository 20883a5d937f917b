// Hand records with per-layer entropies for the entropy table and pictures (reports/layer_entropy.h):
// a hybrid of 4 layers (SSM layers 0 and 2, attention layers 1 and 3) with attention,
// implicit_attention and selection sections, and a dense model whose attention covers every layer.
// Every headline is the mean of its per-layer values (null when one of them is null), as
// records/statistics_verify.h requires of a record qeval wrote.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "tests/support/hand_records.h"

namespace qeval::test {

// The mean of per-layer values as the collector writes it: null when any is null.
inline nlohmann::json layer_mean(const std::vector<nlohmann::json>& values) {
  double sum = 0;
  for (const auto& v : values) {
    if (!v.is_number()) return nullptr;
    sum += v.get<double>();
  }
  return sum / static_cast<double>(values.size());
}

// An attention-shaped section (attention, implicit_attention) over `layers` (empty: no "layers",
// every layer) with these entropies and constant sink statistics.
inline nlohmann::json attention_section(const std::vector<int>& layers, const std::vector<nlohmann::json>& entropy) {
  const std::vector<double> pct(entropy.size(), 10.0), share(entropy.size(), 0.05), sink(entropy.size(), 20.0);
  nlohmann::json s = {{"first_attn_pct", 10.0},
                      {"first_token_share", 0.05},
                      {"sink_rate_pct", 20.0},
                      {"sink_eps", 0.3},
                      {"entropy", layer_mean(entropy)},
                      {"entropy_per_layer", entropy},
                      {"per_layer", {{"first_attn_pct", pct}, {"first_token_share", share}, {"sink_rate_pct", sink}}}};
  if (!layers.empty()) s["layers"] = layers;
  return s;
}

// Sets a sealed record's scheme `index` statistics to the hybrid's sections, every entropy moved
// by `shift`:
//   layer (0-based)   0 SSM        1 attention   2 SSM        3 attention
//   entropy           3.25 (impl)  1.5           3.75 (impl)  2.5
//   selection         4.0          —             null         —
inline void set_hybrid_entropies(nlohmann::json& record, std::size_t index, double shift = 0) {
  nlohmann::json& st = record.at("schemes").at(index).at("statistics");
  st["layers"] = 4;
  st["attention"] = attention_section({1, 3}, {1.5 + shift, 2.5 + shift});
  st["implicit_attention"] = attention_section({0, 2}, {3.25 + shift, 3.75 + shift});
  const std::vector<nlohmann::json> selection = {4.0 + shift, nullptr};
  st["selection"] = {{"layers", {0, 2}},
                     {"entropy", layer_mean(selection)},
                     {"entropy_per_layer", selection},
                     {"entropy_max", std::log(256.0)},
                     {"definition", "SAMBA selection entropy of the SSM layer's Δ (test record)"}};
}

// A dense model of 3 layers, attention everywhere (no "layers"): entropies 1.0, null, 3.0.
inline void set_dense_entropies(nlohmann::json& record, std::size_t index) {
  nlohmann::json& st = record.at("schemes").at(index).at("statistics");
  st["attention"] = attention_section({}, {1.0, nullptr, 3.0});
}

// Statistics of `layers` layers, attention included, for the schemes above to rewrite.
inline nlohmann::json entropy_base_statistics(int layers) {
  return hand_statistics(4.0, 3.0, 20.0, 5.0, 10.0, 20.0, layers);
}

}  // namespace qeval::test
