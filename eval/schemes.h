// Turning scheme names (presets or JSON spec files) into model variants to evaluate, each with
// its statistics collector when asked.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "eval/statistics.h"
#include "model/placement.h"

namespace qeval {

enum class StatsFor { none, full, all };  // which schemes collect statistics
StatsFor parse_stats_for(const std::string& s);  // throws listing none, full, all
std::string to_string(StatsFor s);

struct SchemeOptions {
  StatsFor stats_for = StatsFor::full;
  StatisticsOptions statistics;
  bool quantize_lm_head = false;  // overrides every scheme's quantize_lm_head when true
  // Where the models run: each is built on the CPU in fp32 (rewrite, weight quantisation), then
  // placed there, sharing one placement cache (model/placement.h).
  Placement placement;
};

// Splits "full,int8-fine,my.json" into names; "full" is put first when missing.
std::vector<std::string> parse_scheme_list(const std::string& list);

struct PreparedSchemes {
  std::vector<EvalScheme> schemes;
  std::vector<std::shared_ptr<StatisticsCollector>> statistics;  // per scheme; null when not collected
  // Per-scheme statistics summaries for the record (null where not collected).
  std::vector<nlohmann::json> statistics_summaries() const;
};

// "full" is `full` itself; any other name is a quantisation preset or a JSON scheme file,
// applied to `full` (quant/rewrite.h). Throws listing the presets for an unknown name.
PreparedSchemes make_schemes(const Transformer& full, const std::vector<std::string>& names,
                             const SchemeOptions& options = {});

}  // namespace qeval
