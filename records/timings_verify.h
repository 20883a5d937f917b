// A record's times held to what a clock can give (issue 63): `compare --timings` and the scheme
// tables print them as measured, so a record whose times no run could have produced is refused.
//   "timings" (common/phases.h, absent in records older than the phases, and in merged records):
//     {"total_s", "phases": {phase: s}, "schemes": {scheme: {quantize, forward, statistics, head}}}
//     every value finite, ≥ 0 and below kMaxRecordSeconds; only the phases qeval measures (one
//     absent from an older record counts 0); the phases add up to total_s within 1 %; "schemes"
//     names each scheme of the record once and nothing else, and for each phase the schemes'
//     seconds add up to at most the phase's (1 % room);
//   "timing.total_seconds" and each scheme's "timing" {"forward_seconds", "tokens_per_second"}:
//     finite, ≥ 0, below the same bound; tokens per second × forward seconds is the same count of
//     tokens for every scheme that ran (all schemes run every window).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace qeval {

// No run of qeval lasts 30 years: a longer time is not a measurement (a forged 1e308 would print
// as a 309-digit number of seconds).
inline constexpr double kMaxRecordSeconds = 1e9;

// Throws qeval::Error naming `source` and the key that disagrees.
void verify_timings(const nlohmann::json& record, const std::string& source);

}  // namespace qeval
