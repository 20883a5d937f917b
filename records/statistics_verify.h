// A record's statistics summary held to itself and to the record (issues 51, 63): the headline
// values are the means of their per-layer values (stats/statistics.h: "every headline value is
// the mean over layers of the per-layer values"), every per-layer list is as long as the layers
// it covers, every section's "layers" names each layer of the model's kind once, in ascending
// order (attention: the model's attention layers, every layer when it has no "layers";
// implicit_attention and selection: its Mamba / Mamba-2 layers, from model.config.layer_mixers),
// and every value lies in its domain — kurtosis ≥ 1, max |x| ≥ 0, ‖x‖∞/‖x‖₂ in [0, 1], shares in
// [0, 1], percentages in [0, 100], entropies in [0, log L] with L the window length (the
// protocol's seq_len; an attention row or a selection distribution spreads over at most L
// positions), selection.entropy_max = log L (null: not a number, as the collector writes NaN).
// A forged baseline statistic (a lower kurtosis, a zero sink rate, an SSM section grafted onto
// an attention model) is refused before a gate reads it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qeval {

// What a record says about the model and the windows its statistics describe.
struct StatisticsShape {
  std::int64_t layers = 0;  // model.config.n_layers; 0: the record does not say (then no kinds either)
  std::vector<std::int64_t> attention_layers, ssm_layers;  // 0-based, ascending
  std::int64_t window = 0;          // L: the protocol's seq_len, the longest window
  bool every_window_full = true;    // every window is L long (every protocol but stride)
};

// From the record's model.config and protocol; throws qeval::Error naming `source` and the key
// when they are malformed.
StatisticsShape statistics_shape(const nlohmann::json& record, const std::string& source);

// Throws qeval::Error naming `where` (e.g. "r.json: scheme full") and the value that disagrees.
void verify_statistics_summary(const nlohmann::json& statistics, const StatisticsShape& shape, const std::string& where);

}  // namespace qeval
