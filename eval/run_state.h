// The accumulated state of an evaluation — per-window scores and hashes for every scheme, and
// every statistics collector's per-window state — as exact JSON. A killed run resumes from it
// (--resume), and shard records carry it so `qeval merge` can rebuild the one-run record.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "eval/statistics.h"

namespace qeval {

// {"windows", "scored_tokens", "processed_tokens", "seconds",
//  "window_hashes": {"<index>": "<16 hex>"}, "schemes": [{"forward_seconds", "rows": {"<index>": row}}],
//  "statistics": [collector state or null per scheme]}
nlohmann::json run_state_to_json(const EvalResult& result,
                                 const std::vector<std::shared_ptr<StatisticsCollector>>& statistics);

// Restores `result` and replaces each non-null collector's state. Throws naming `source` when
// the state does not fit (scheme count, statistics presence) or is malformed.
EvalResult run_state_from_json(const nlohmann::json& state,
                               std::vector<std::shared_ptr<StatisticsCollector>>& statistics, const std::string& source);

// Adds `other` (disjoint windows) into `into`; throws when a window appears in both.
void merge_results(EvalResult& into, const EvalResult& other, const std::string& source);

}  // namespace qeval
