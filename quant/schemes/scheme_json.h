// A scheme spec to and from JSON (the form quant/schemes/spec.h documents), with its validation.
// Each kind whose JSON is a part of its own (llama.cpp's types: ggml_rules.h) is reached through
// the table of parts in scheme_json.cpp; the parts know the spec's types, never this parser.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "quant/schemes/spec.h"

namespace qeval {

// Throws qeval::Error naming `source` and listing the valid values when a field is out of range.
void validate_scheme(const SchemeSpec& spec, const std::string& source);

// True for "<scheme>~r<seed>", the name eval gives a scheme's rounding variant (--rounding-band):
// records, compare and check read such a row as part of its scheme's band, so no scheme of a user's
// may take that form.
bool is_rounding_variant_form(const std::string& name);

// An outlier threshold as JSON writes it: +infinity becomes the largest double (see above).
double outlier_threshold_for_json(double threshold);

// The fully resolved spec (every key written), as result records store it.
nlohmann::json scheme_to_json(const SchemeSpec& spec);
// Parses and validates; `source` names the file (or preset) in errors.
SchemeSpec scheme_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace qeval
