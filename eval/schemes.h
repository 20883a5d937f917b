// Turning scheme names (presets or JSON spec files) into the schemes the evaluator runs, each with
// its statistics collector when asked. A scheme is a rewrite of full precision's blocks and head
// (quant/rewrite.h SchemeRewrite), applied when the evaluation plan reaches each part, so no
// scheme's whole model needs to exist at once (DESIGN.md §11).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "stats/figure_data.h"
#include "stats/statistics.h"
#include "model/placement.h"
#include "quant/kv_cache.h"
#include "quant/rewrite.h"

namespace qeval {

enum class StatsFor { none, full, all };  // which schemes collect statistics
StatsFor parse_stats_for(const std::string& s);  // throws listing none, full, all
std::string to_string(StatsFor s);

struct SchemeOptions {
  StatsFor stats_for = StatsFor::full;
  StatisticsOptions statistics;
  bool quantize_lm_head = false;  // overrides every scheme's quantize_lm_head when true
  bool quantize_ssm_inner = false;  // overrides every scheme's quantize_ssm_inner (Mamba's x_proj, dt_proj) when true
  // Where the models run (recorded in each description; the evaluator places the blocks).
  Placement placement;
  // The rounding band (eval/rounding_band.h): this many variants of each quantised scheme,
  // appended after every named scheme, inputs jittered by this relative size.
  std::int64_t rounding_band = 0;
  double rounding_eps = 0;  // 0: kDefaultRoundingEps
  // > 0: every quantised scheme itself runs with the input jitter of this seed (its name kept,
  // its description saying "rounding_seed"): another valid implementation of the same schemes.
  std::int64_t rounding_seed = 0;
  // Static activation scales (eval/calibration_pass.h): called for each scheme whose input
  // activations are calibrated; a scheme that needs it fails naming the scheme when it is empty.
  std::function<std::shared_ptr<const CalibratedScales>(const SchemeSpec&)> calibrate;
  // Calibrated weights (GPTQ; eval/weight_calibration_pass.h): called for each scheme whose weights'
  // method needs calibration; a scheme that needs it fails naming the scheme when it is empty.
  std::function<std::shared_ptr<const CalibratedWeights>(const SchemeSpec&)> calibrate_weights;
  // > 0: every calibrated scheme's calibration windows (--calibration-windows), overriding its spec's.
  std::int64_t calibration_windows = 0;
  // The other options given that act only through calibrated schemes ("--calibration-data c4.jsonl"):
  // refused, named, when no scheme calibrates anything.
  std::vector<std::string> calibration_options;
  // Non-empty: llama.cpp's importance matrix for every scheme of kind ggml (--imatrix), in place of
  // a spec's own "imatrix" (eval/ggml_imatrix.h); refused when no scheme is of kind ggml.
  std::string imatrix;
  // The evaluation's window length (0: not known here): a kv_cache that keeps this many first
  // positions or more would quantise nothing, and is refused.
  std::int64_t window_length = 0;
};

// Splits "full,int8-fine,my.json" into names; "full" is put first when missing.
std::vector<std::string> parse_scheme_list(const std::string& list);

// What a scheme measures besides its scores and statistics, carried by run states and shard records
// (records/run_state.h) so that resumed and merged runs report every window: its quantised KV
// cache's error sums by layer and window (none without kv_cache), and the positions its linears
// kept in full precision (SchemeRewrite's kept_positions_report: integer counts; null without
// keep_tokens).
struct SchemeMeasures {
  std::optional<KvErrorSums> kv_cache_errors;
  nlohmann::json kept_positions;
};
using SchemeMeasuresList = std::vector<SchemeMeasures>;

struct PreparedSchemes {
  std::vector<EvalScheme> schemes;
  std::vector<std::shared_ptr<SchemeRewrite>> rewrites;  // per scheme; null for full precision
  std::vector<std::shared_ptr<StatisticsCollector>> statistics;  // per scheme; null when not collected
  // Per-scheme statistics summaries for the record (null where not collected).
  std::vector<nlohmann::json> statistics_summaries() const;
  // After the evaluation: each description completed with its rewrite's report (every layer
  // rewritten by then), and each scheme's linear weight bytes.
  void finish_descriptions();
  std::vector<std::int64_t> linear_weight_bytes() const;
  // What the quantised layers logged (kept positions, outlier features, kernels used), per scheme.
  nlohmann::json kept_positions_report(std::size_t scheme) const;
  nlohmann::json outlier_features_report(std::size_t scheme) const;
  nlohmann::json engines_used_report(std::size_t scheme) const;
  // Each scheme's measures over the windows run so far, an earlier process's included.
  SchemeMeasuresList measures() const;
  // Adds the measures of windows an earlier process ran (a resumed state); throws naming `source`
  // when a scheme measures something the state lacks, or the state holds what no scheme measures.
  void add_measures(const SchemeMeasuresList& earlier, const std::string& source);
  // What add_measures took that the rewrites do not hold (kept positions), per scheme.
  std::vector<nlohmann::json> earlier_kept_positions;
};

// A statistics collector for `scheme` (its observer, and its begin_batch before any it had).
std::shared_ptr<StatisticsCollector> attach_statistics(EvalScheme& scheme, const ModelConfig& config,
                                                      const StatisticsOptions& options);

// Routes `scheme`'s block and head rewrites (and which layers it rewrites) through `rewrite`.
void use_rewrite(EvalScheme& scheme, const std::shared_ptr<SchemeRewrite>& rewrite, const ModelConfig& config);

// "full" is full precision itself; any other name is a quantisation preset or a JSON scheme
// file, applied to full precision's linears (quant/rewrite.h). Throws listing the presets for an
// unknown name, and before any weight is read for a pattern that matches no linear of `config`.
PreparedSchemes make_schemes(const ModelConfig& config, const std::vector<std::string>& names,
                             const SchemeOptions& options = {});

// The fp32 linear weight bytes of the model (blocks + head), from its config: what full
// precision's record entry says.
std::int64_t full_linear_weight_bytes(const ModelConfig& config);

// Adds a FigureDataObserver to `scheme` beside whatever observer it has (statistics).
std::shared_ptr<FigureDataObserver> attach_figure_observer(EvalScheme& scheme, std::int64_t map_T = 64);

}  // namespace qeval
