// `qeval compare --timings`: where each record's time went, one row per record, from its
// "timings" (common/phases.h: seconds by phase, adding up to total_s). Records written before
// phases were measured show "—".
#pragma once

#include <string>
#include <vector>

#include "reports/compare.h"

namespace qeval {

// Markdown: | model | total s | read | convert | ... | other |, each phase in seconds.
// CSV: the same columns. JSON: {"timings": [{"model", "record", "total_s", "phases"}]} (null when absent).
std::string format_timings(const std::vector<LabeledRecord>& records, CompareFormat format);

}  // namespace qeval
