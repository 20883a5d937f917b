// JSON files whose every key counts: nlohmann keeps the last of two equal keys in an object
// silently, so a tolerance file that names a limit twice would gate on one of them and a --config
// file that gives an option twice would take one. These are refused, naming the key and the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace qeval {

// Parses `text`; throws qeval::Error naming `source` on a syntax error or a key repeated in one
// object ("<source>: key \"dppl_abs\" appears twice in one object").
nlohmann::json parse_json_strict(const std::string& text, const std::string& source);

}  // namespace qeval
