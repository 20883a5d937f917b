// `qeval check` on a series record (issue 44): the training-CI gate over a run's trajectory, with
// the exit statuses of a single record's check (reports/check.h): 0 within every limit, 1 with each
// violation named, 2 for unusable input (every such condition throws qeval::Error).
//
// Two kinds of gate, chosen by the tolerance file:
//
// 1. Rules over the run itself (a file with "rules"; --baseline only for "reference": "baseline"):
//    {
//      "description": "...",
//      "rules": [
//        {"quantity": "int8-coarse.dppl", "at": "last", "reference": "first_past_warmup", "max_ratio": 1.2},
//        {"quantity": "full.sink_rate_pct", "at": "every", "max": 5},
//        {"quantity": "int8-coarse.paired_dnll_mean", "at": "every", "reference": "baseline", "max_increase": 0.001}
//      ]
//    }
//    quantity   SCHEME.NAME; NAME is ppl, nll_mean, dppl, paired_dnll_mean, kl_mean, top1_agreement
//               or a statistic of check's tolerance files (kurtosis_rest, sink_rate_pct, ...)
//    at         "last" (default), "every", or a step number
//    reference  "first", "first_past_warmup" (the first checkpoint whose step reached the recipe's
//               warm-up, when its lr first peaked; "warmup": N in the rule when the series does not
//               know it), a step number, or "baseline" (the --baseline series at the same step)
//    limits     "max" / "min" on the value; "max_ratio" (value / reference) and "max_increase"
//               (value − reference), which need a reference; one rule may give several
//    A value that is null (NaN, not collected) at a checked step is a violation; a null
//    reference is noted and not checked; a ratio against a reference ≤ 0 is unusable input.
//
// 2. A run against a baseline run at equal steps (a check tolerance file without "rules", and
//    --baseline B.json, a series record): every step both series have is checked exactly as
//    `qeval check` checks two records (their per-checkpoint records, reports/check.h); steps only one
//    has are noted; no common step is unusable input.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

#include "reports/check.h"

namespace qeval {

// `baseline` may be empty (rules without "reference": "baseline"). Series must agree on protocol,
// data and precision unless options.allow_protocol_mismatch.
CheckReport check_series_files(const std::filesystem::path& series, const std::filesystem::path& baseline,
                               const std::filesystem::path& tolerances, const CheckOptions& options);

// The rules form on loaded series (for tests and for callers that hold them); `baseline` null
// when none.
CheckReport check_series_rules(const nlohmann::json& series, const nlohmann::json& baseline,
                               const nlohmann::json& rules_file, const std::string& rules_source,
                               const CheckOptions& options);

}  // namespace qeval
