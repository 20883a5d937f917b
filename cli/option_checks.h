// Option checks with readable ranges. CLI11's own (PositiveNumber, NonNegativeNumber, Range over
// doubles) print their bound with std::to_string(DBL_MAX), a 309-digit number, and accept "nan"
// and "inf" for floating-point options. These say "--lr: inf is not a finite number in (0, 1e+06]"
// and, like every other refusal, exit 2 (main.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/output_paths.h"

namespace qeval::cli {

// An integer in [lo, hi]; hi at its default reads "an integer >= lo".
CLI::Validator integer_in(std::int64_t lo, std::int64_t hi = std::numeric_limits<std::int64_t>::max());

// A finite number between lo and hi; `lo_open` / `hi_open` exclude the bound itself.
CLI::Validator number_in(double lo, double hi, bool lo_open = false, bool hi_open = false);

// A finite number > 0 (no upper bound).
CLI::Validator positive_number();

// A byte size ("300M", "6G", common/sizes.h parse_size): an empty one is refused, never read as
// "no cap" (issue 63); `option` names the option in the message.
CLI::Validator byte_size(const std::string& option);

// An output path given on the command line: refuses an empty one ("--out ''" wrote nothing and
// exited 0; issue 51).
CLI::Validator output_path();

// check_output_is_not_an_input (an output that is an input, or lies inside an input folder, is
// refused) is common/output_paths.h's, shared by every subcommand.

// --threads: `requested` when the hardware has that many threads; above that, the hardware's count
// with a note on stderr (more threads than the hardware runs only adds scheduling and memory: 10000
// threads took minutes for one 16-token window).
int cap_threads(std::int64_t requested, const char* option = "--threads");

}  // namespace qeval::cli
