// Turning scheme names (presets or JSON spec files) into model variants to evaluate.
#pragma once

#include <string>
#include <vector>

#include "eval/evaluator.h"

namespace qeval {

// Splits "full,int8-fine,my.json" into names; "full" is put first when missing.
std::vector<std::string> parse_scheme_list(const std::string& list);

// Builds one EvalScheme per name: "full" is `full` itself; any other name is a quantisation
// preset or a JSON scheme file, applied to `full`.
std::vector<EvalScheme> make_schemes(const Transformer& full, const std::vector<std::string>& names);

}  // namespace qeval
