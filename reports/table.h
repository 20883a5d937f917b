// Human-readable tables made from result records (so `eval` and `compare` print the same way).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace qeval {

// One row per scheme: PPL ± error, ΔPPL, paired ΔNLL ± se, KL, top-1 agreement, Δp, speed. A
// perplexity that is not a finite number prints as "not finite", and every comparison with it as "—".
std::string scheme_table_markdown(const nlohmann::json& record);

// The paper's Table 3 layout for one record: PPL full, coarse Δ, moderate Δ, fine Δ, 4-bit Δ
// (columns of schemes the record lacks are shown as "—").
std::string penalty_row_markdown(const nlohmann::json& record);

// Outlier and attention statistics per scheme that collected them (the paper's Table 2
// columns): kurtosis first/rest, max |activation| first/rest, %first-attn, first-token share,
// Sink₁^ε rate, attention entropy. Empty when no scheme has statistics.
std::string statistics_table_markdown(const nlohmann::json& record);

// Formats a number for tables; null (NaN, not collected) prints as "—", inf as "not finite";
// `sign`: always with its sign (+0.0123).
std::string table_number(const nlohmann::json& value, int decimals, bool sign = false);

// Whether a record's scheme entry has a perplexity that is a finite number > 0. Tables print no
// comparison (Δ, agreement, KL) beside a scheme, or a full precision, without one.
bool finite_ppl(const nlohmann::json& scheme);

}  // namespace qeval
