// Per-layer sensitivity (DESIGN.md §5, issue 15): a scheme applied to one linear layer, or to
// one layer kind across all blocks, at a time; the ΔNLL of each beside the input statistics of
// its layers, and which tokens carry the penalty.
//
// Units. `layer`: every linear the base scheme selects, one at a time (layers.3.mlp.down).
// `kind`: one canonical kind at a time across all blocks (mlp.down = layers.*.mlp.down, among
// the linears the base scheme selects; lm_head is its own kind). Units come in execution order.
//
// Variants. Unit u's scheme is the base spec with include = u's exact linear names (each one
// the base selects, so the base's exclude list has nothing left to do and is cleared) and the
// name "<base>@<unit>", e.g. int8-moderate@layers.3.mlp.down or int8-moderate@mlp.down. So a
// unit's result equals a normal evaluation of a scheme file that is the base with
// "include": [those names].
//
// One pass. Full precision (scheme 0, its linears wrapped by a LinearInputRecorder) and every
// variant run in ONE evaluate() call, layer-major (eval/evaluator.h): each chunk of windows goes
// through every scheme, so the per-unit ΔNLL is the eval record's paired difference on the same
// windows (summarize() of the evaluator's per-window rows, not re-derived). A variant computes
// nothing of its own before its unit's first layer: its stream is full precision's until then.
//
// Which tokens carry the penalty. The evaluator hands each scored batch's per-token NLL (the
// values its window rows are summed from) to each variant; per token, d = nll_variant −
// nll_full; per unit:
//   first_share     Σ d over the first scored position of every window / Σ d over all scored
//                   positions: the fraction of the unit's total ΔNLL that falls on the first
//                   scored token (null when the total is not positive: no penalty to share)
//   first / rest    tokens, Σ d and mean d at the first scored position and at the others
//   top_positions   the positions (0-based index of the target token in its window) with the
//                   largest mean d over windows, largest first (ties: lower position)
// With protocol `windows` the first scored target is position 1, predicted from position 0,
// whose input rows are the statistics' "first".
//
// Rounding band of a unit (issue 53, eval/rounding_band.h): with rounding_band K > 0, each unit's
// variant gets K rounding variants ("<base>@<unit>~r<seed>", seeds 1..K: its quantised linears'
// inputs moved by a few ulps), run in the same pass after every unit's variant. The record's
// scheme entries then carry the variants, and cli/sensitivity.cpp gives each unit the band of
// its ΔNLL over the K + 1 implementations (records/rounding_band.h): which layers' rounding is
// chaotic, beside their input max |x|.
//
// Input statistics of a unit (stats/linear_inputs.h, full-precision inputs): a layer's own; for a
// kind, the mean over its layers of each first/rest statistic, and the largest |x| of any of them
// (with its layer and feature).
#pragma once

#include "model/placement.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "stats/linear_inputs.h"
#include "eval/token_scores.h"
#include "model/transformer.h"
#include "quant/rewrite.h"
#include "quant/schemes/spec.h"

#include <functional>

namespace qeval {

enum class SensitivityGrouping { layer, kind };
SensitivityGrouping parse_sensitivity_grouping(const std::string& s);  // throws listing layer, kind
std::string to_string(SensitivityGrouping g);

// "layers.3.mlp.down" → "mlp.down", "layers.3.moe.experts.5.up" → "moe.experts.*.up" (every expert one
// unit); names outside the blocks ("lm_head") are their own kind.
std::string linear_kind(const std::string& linear_name);

struct SensitivityUnit {
  std::string name;                 // "layers.3.mlp.down" (layer) or "mlp.down" (kind)
  std::vector<std::string> layers;  // exact canonical linear names, execution order
};

// The units of `base` on `model`. Throws naming the scheme when it quantises nothing, when an
// include/exclude pattern matches no linear of the model, or when it selects no linear.
std::vector<SensitivityUnit> sensitivity_units(const ModelConfig& config, const SchemeSpec& base, SensitivityGrouping by);

// The variant: `base` restricted to the unit's layers, named "<base.name>@<unit.name>".
SchemeSpec unit_scheme(const SchemeSpec& base, const SensitivityUnit& unit);

struct SensitivityOptions {
  SensitivityGrouping by = SensitivityGrouping::layer;
  std::int64_t batch_size = 1;
  bool progress = true;               // evaluate()'s ETA and running PPL on stderr
  std::int64_t expected_windows = 0;  // for the ETA
  std::int64_t top_positions = 5;
  std::int64_t rounding_band = 0;  // K rounding variants per unit (0: none)
  double rounding_eps = 0;         // their input jitter; 0: kDefaultRoundingEps
  Placement placement;  // where the models run (they are placed before their linears are wrapped)
  // The evaluation plan for these schemes (eval/memory_plan.h); empty: every layer resident.
  std::function<EvalPlan(const std::vector<EvalScheme>&, const std::vector<std::shared_ptr<SchemeRewrite>>&)> plan;
};

struct PositionPenalty {
  std::int64_t position = 0;  // of the target token in its window, 0-based
  std::int64_t tokens = 0;    // windows that scored it
  double dnll_mean = 0;
};

struct UnitInputStats {
  double kurtosis_first = 0, kurtosis_rest = 0;
  double max_abs_first = 0, max_abs_rest = 0;
  double inf_over_l2_first = 0, inf_over_l2_rest = 0;
  double largest_value = 0;  // signed; the largest |x| over the unit's layers
  std::string largest_layer;
  std::int64_t largest_feature = 0;
};

struct UnitSensitivity {
  SensitivityUnit unit;
  std::string scheme;            // the variant's name
  std::size_t scheme_index = 0;  // in SensitivityRun::schemes (0 is full precision)
  SchemeSummary summary;         // summarize() of the variant's rows: diff_mean/diff_se = ΔNLL ± se
  double dppl_rel = 0;           // (ppl − ppl_full) / ppl_full, as the record's vs_full.dppl_rel
  UnitInputStats inputs;
  std::int64_t first_tokens = 0, rest_tokens = 0;
  double first_dnll_sum = 0, rest_dnll_sum = 0;
  double first_share = 0;  // NaN when first + rest is not positive
  std::vector<PositionPenalty> top_positions;
};

struct SensitivityRun {
  SchemeSpec base;
  SensitivityGrouping by = SensitivityGrouping::layer;
  // [0] full precision, then one variant per unit, in unit order, then (rounding_band K > 0) the
  // units' rounding variants, K per unit, in unit order.
  std::vector<EvalScheme> schemes;
  std::vector<std::shared_ptr<SchemeRewrite>> rewrites;  // per scheme (null for full precision)
  EvalResult result;
  std::shared_ptr<LinearInputRecorder> inputs;  // the full-precision pass's linear inputs
  std::vector<UnitSensitivity> units;           // sorted: largest ΔNLL first (ties: unit order)

  // The record's "sensitivity" section:
  //   {"scheme": base name, "base_scheme": resolved spec, "by": "layer"|"kind",
  //    "definitions": {...}, "full": {"nll_mean", "ppl"},
  //    "units": [{"rank", "unit", "scheme", "layers", "dnll_mean", "dnll_se", "dppl", "dppl_rel",
  //               "kl_mean", "top1_agreement",
  //               "inputs": {"kurtosis": {"first", "rest"}, "max_abs": {...}, "inf_over_l2": {...},
  //                          "largest": {"value", "abs", "layer", "feature"}},
  //               "tokens": {"first": {"tokens", "dnll_sum", "dnll_mean"}, "rest": {...},
  //                          "first_share", "top_positions": [{"position", "tokens", "dnll_mean"}]}}],
  //    "linear_inputs": LinearInputRecorder::to_json(false)}   NaN is written as null.
  nlohmann::json to_json() const;
};

// Runs full precision and every unit's variant of `base` over `windows` in one evaluate() pass.
// Throws (before any window is read) like sensitivity_units, and like quantize_model.
SensitivityRun run_sensitivity(ModelReader& full, const SchemeSpec& base, WindowSource& windows,
                               const SensitivityOptions& options = {});

}  // namespace qeval
