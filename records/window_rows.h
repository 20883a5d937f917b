// Per-window rows read back from files (resume states, shard states, records' "per_window"),
// checked before anything is summed from them: a key must be a window index written as a
// decimal integer, and every value must be in its domain. A row that breaks a rule is refused
// with the file, the window and the value, never summed into a perplexity.
//
// Domains of one window's row (WindowScores, eval/token_scores.h), n = its scored tokens:
//   tokens         1 <= n <= max_tokens (the protocol's window length; 0: no bound given)
//   nll_sum        finite, >= 0 (a negative log-likelihood is never negative)
//   nll_sq_sum     finite, >= 0 and >= nll_sum² / n (a sum of squares is at least the square of
//                  the sum over n, Cauchy–Schwarz; 1e-9 relative slack for rounding)
//   diff_sum       finite;  diff_sq_sum: finite, >= diff_sum² / n (same slack)
//   kl_sum         finite, >= -1e-6 · n (KL is >= 0; float rounding of per-token sums)
//   top1_agree     0 <= top1_agree <= n
//   dp_sum         finite, |dp_sum| <= n (a difference of probabilities)
// and, in rows written since issue 80 (older rows have none of them, and no tails in the record):
//   kl_sq_sum, rkl_sq_sum  >= the sum² / n;  rkl_sum >= -1e-6 · n
//   dp_sq_sum              >= dp_sum² / n and <= n;  0 <= dp_4_sum <= dp_sq_sum
//   top1_lost, top1_gained >= 0, adding up to at most n
//   buckets                [tokens, diff_sum, diff_sq_sum, kl_sum] per position bucket, each in its
//                          domain, their tokens adding up to n (full precision: none)
// The full-precision scheme's own row compares it with itself: diff, KL and Δp are 0 and every
// top-1 agrees.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "eval/token_scores.h"

namespace qeval {

// "12" → 12. Anything else (signs, spaces, "1e3", "abc", too large) is refused naming `where`.
std::int64_t window_index_key(const std::string& key, const std::string& where);

// One row, checked; `where` names the file, the scheme and the window in refusals.
WindowScores checked_window_scores(const nlohmann::json& row, std::int64_t max_tokens, bool full_precision,
                                   const std::string& where);

// A JSON object of rows keyed by window index ("per_window" of a record, "rows" of a state), each
// row checked; `where` names the file and the scheme ("S.json: scheme int8-fine").
std::map<std::int64_t, WindowScores> checked_window_rows(const nlohmann::json& rows, std::int64_t max_tokens,
                                                         bool full_precision, const std::string& where);

// A JSON object of window hashes keyed by window index, each 16 hex digits (XXH3 of the window's
// tokens); `where` names the file ("S.json: window_hashes").
std::map<std::int64_t, std::uint64_t> checked_window_hashes(const nlohmann::json& hashes, const std::string& where);

// One hash of 16 hex digits; `where` names the file and the field.
std::uint64_t hash_from_hex(const nlohmann::json& value, const std::string& where);

}  // namespace qeval
