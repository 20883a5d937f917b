// The accumulated state of an evaluation — per-window scores and hashes for every scheme, and
// every statistics collector's per-window state — as exact JSON. A killed run resumes from it
// (--resume), and shard records carry it so `qeval merge` can rebuild the one-run record.
//
// A state read back is checked, not trusted: its checksum (XXH3 over the content, written with
// it) must match, every key must be a window index, every row must be in its domain
// (records/window_rows.h), every scheme must hold the same windows as the hash list, the counts
// must be the sums of the rows, and every collector must hold exactly those windows.
// verify_resumed_windows() then holds each kept row against the window it claims in the data.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "eval/schemes.h"  // SchemeMeasures
#include "stats/statistics.h"
#include "loaders/protocols/protocol.h"

namespace qeval {

// {"windows", "scored_tokens", "processed_tokens", "seconds",
//  "window_hashes": {"<index>": "<16 hex>"}, "schemes": [{"forward_seconds", "rows": {"<index>": row}}],
//  "statistics": [collector state or null per scheme],
//  "kv_cache_errors": [null or {"<layer>": {"<index>": [k_first, k_rest, v_first, v_rest errors, then
//                      the same four norms]}} per scheme] (only when a scheme has a quantised KV cache),
//  "kept_positions": [null or the scheme's report over the state's windows] (only when a scheme keeps
//                    tokens),
//  "checksum": "<16 hex>"}
nlohmann::json run_state_to_json(const EvalResult& result,
                                 const std::vector<std::shared_ptr<StatisticsCollector>>& statistics,
                                 const SchemeMeasuresList& measures = {});

// Restores `result` and replaces each non-null collector's state. Throws naming `source` when
// the state does not fit (scheme count, statistics presence), is malformed, or breaks a rule
// above. `max_window_tokens`: the protocol's window length (a row scores at most that many; 0:
// not checked). `measures`, when given, receives each scheme's measures (none where the state has
// none); KV error sums must hold, in every layer, exactly the state's windows, and kept positions
// count each of them once.
EvalResult run_state_from_json(const nlohmann::json& state,
                               std::vector<std::shared_ptr<StatisticsCollector>>& statistics, const std::string& source,
                               std::int64_t max_window_tokens = 0, SchemeMeasuresList* measures = nullptr);

// XXH3 of a window's first scored position and tokens: the hash EvalResult::window_hashes holds
// (the evaluator computes the same; a test holds them equal).
std::uint64_t window_content_hash(const Window& window);

// Holds every window of `resumed` against the data: `windows` (a fresh source of the same
// evaluation windows) is read until each kept window has been seen; its hash and its scored-token
// count must match, a kept window the data does not have, or that `selected` (the shard) rejects,
// is refused. Throws naming `source`. Reads no further than the last kept window.
void verify_resumed_windows(const EvalResult& resumed, WindowSource& windows,
                            const std::function<bool(std::int64_t)>& selected, const std::string& source);

// Adds `other` (disjoint windows) into `into`; throws when a window appears in both.
void merge_results(EvalResult& into, const EvalResult& other, const std::string& source);

}  // namespace qeval
