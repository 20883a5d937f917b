// LinearInputRecorder: the input of every (or every named) linear layer, reduced as it streams
// through the forward pass. It is installed as a decorator around each linear (the wrapper
// records, then calls the wrapped linear with the same tensor), so the model's outputs are
// bit-identical to the unwrapped model's.
//
// Definitions (the same as DESIGN.md §6 gives for hidden states, computed by the same code,
// stats/hidden_stats.h). For one linear, X[b, l, j] is its input: sequence b (axis 0 of the
// [B, L, in] tensor), position l (0-based), input feature j. Per sequence and per row (position):
//   kurtosis     E_j[(X − μ)^4] / (E_j[(X − μ)^2])^2, μ = E_j[X], population moments over the
//                `in` features, float64 (NaN for a constant row)
//   max_abs      max_j |X[b, l, j]|
//   inf_over_l2  max_j |X[b, l, j]| / sqrt(Σ_j X[b, l, j]^2)
// each for the first position (l = 0) and as the mean over the rest (l = 1..L−1) within the
// sequence, then averaged over sequences (the rest over sequences with L ≥ 2 only; NaN when
// there are none). Besides:
//   feature_max_abs  [in] float64: max |X[b, l, j]| per feature j over every sequence and
//                    position seen (SmoothQuant's calibration statistic max|X_j|)
//   largest          the element of largest |X| over everything seen: signed value, feature j,
//                    position l, and the sequence's number in arrival order (0-based). Ties go
//                    to the earlier sequence, then the earlier position, then the lower feature.
// Every sequence is reduced on its own and sums run in arrival order, so the numbers do not
// depend on the batch size (the same sequences in the same order give the same bits).
//
// Cost: a float64 copy of each input in chunks (hidden_layer_stats) plus one max per feature.
// Not thread-safe: one forward pass at a time through the wrapped model.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/linear.h"
#include "model/transformer.h"

namespace qeval {

struct LinearInputSummary {
  std::string name;  // canonical linear name, e.g. layers.3.mlp.down
  std::int64_t in_features = 0;
  std::int64_t sequences = 0;       // sequences seen
  std::int64_t rest_sequences = 0;  // of which had L ≥ 2 (those the *_rest values average)
  double kurtosis_first = 0, kurtosis_rest = 0;
  double max_abs_first = 0, max_abs_rest = 0;
  double inf_over_l2_first = 0, inf_over_l2_rest = 0;
  double largest_value = 0;  // signed
  std::int64_t largest_feature = 0, largest_position = 0, largest_sequence = 0;
  at::Tensor feature_max_abs;  // [in_features] float64

  // {"name", "in_features", "sequences", "rest_sequences", "kurtosis": {"first", "rest"},
  //  "max_abs": {...}, "inf_over_l2": {...}, "largest": {"value", "abs", "feature", "position",
  //  "sequence"}, "feature_max_abs": [in]}; NaN is written as null. feature_max_abs only when
  // `with_features`.
  nlohmann::json to_json(bool with_features = true) const;
};

class LinearInputRecorder {
 public:
  // The linears to record, in the model's execution order.
  explicit LinearInputRecorder(std::vector<std::string> names);

  // Reduces one input x: [B, L, in] of the linear `slot` (its index in names()).
  void record(std::size_t slot, const at::Tensor& x);

  const std::vector<std::string>& names() const { return names_; }
  bool records(const std::string& linear_name) const;
  // The slot of a recorded linear (its index in names()); throws when it is not recorded.
  std::size_t slot(const std::string& linear_name) const;

  // max |x| per input feature over every sequence seen: [in] float64 (a copy). Throws naming
  // the linear when it is not recorded or has seen no input yet.
  at::Tensor feature_max_abs(const std::string& linear_name) const;
  // One linear's summary; throws like feature_max_abs.
  LinearInputSummary summary(const std::string& linear_name) const;
  // Every recorded linear that has seen input, in execution order.
  std::vector<LinearInputSummary> summary() const;
  // {"definitions": "...", "linears": [LinearInputSummary::to_json(with_features)...]}
  nlohmann::json to_json(bool with_features = true) const;

  // Forgets everything seen.
  void reset();

 private:
  struct Accumulator {
    std::int64_t in_features = 0, sequences = 0, rest_sequences = 0;
    double kurtosis_first = 0, kurtosis_rest = 0, max_abs_first = 0, max_abs_rest = 0;
    double inf_over_l2_first = 0, inf_over_l2_rest = 0;
    double largest_value = 0;
    std::int64_t largest_feature = 0, largest_position = 0, largest_sequence = 0;
    at::Tensor feature_max_abs;  // [in] float64, undefined until the first input
  };
  const Accumulator& seen(const std::string& linear_name) const;
  LinearInputSummary summarize(std::size_t slot) const;

  std::vector<std::string> names_;
  std::map<std::string, std::size_t> slots_;
  std::vector<Accumulator> acc_;
};

// The decorator: forward(x) records x, then returns inner->forward(x). Everything else is the
// inner linear's (describe() too, so records of the wrapped model read as before).
class RecordingLinear final : public LinearDecorator {
 public:
  RecordingLinear(std::shared_ptr<const Linear> inner, std::shared_ptr<LinearInputRecorder> recorder, std::size_t slot);
  at::Tensor forward(const at::Tensor& x) const override;

 private:
  std::shared_ptr<LinearInputRecorder> recorder_;
  std::size_t slot_;
};

// Wraps the named linears of `model` (all of them, lm_head included, when `names` is empty) and
// returns the recorder they report to. Throws, changing nothing, when a name is unknown or
// repeated (listing the model's linears). The wrapped model is meant for full-precision
// passes: quantize_model refuses it (its linears are no longer FloatLinear), so quantise a copy
// taken before wrapping.
std::shared_ptr<LinearInputRecorder> record_linear_inputs(Transformer& model, const std::vector<std::string>& names = {});

// The block with each of its linears that `recorder` records wrapped in a RecordingLinear (the
// others as they are): how a layer-major evaluation records one block at a time.
Block record_block_inputs(const Block& block, const std::shared_ptr<LinearInputRecorder>& recorder);

}  // namespace qeval
