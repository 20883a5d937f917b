// Typed reads of a scheme file's values (quant/schemes/scheme_json.cpp, quant/schemes/ggml_rules.cpp): a value of the
// wrong JSON type is refused naming the file, the key and the type expected, e.g.
//   scheme file s.json: weights.element should be a string (e4m3, e5m2), found 3
// never with nlohmann's "type must be string, but is number", which names neither.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "common/error.h"
#include "common/printable.h"

namespace qeval {

// `what` names the file and the key ("scheme file s.json: weights.element"); `expected` (may be
// empty) lists the valid values.
inline std::string spec_string(const nlohmann::json& v, const std::string& what, const std::string& expected = "") {
  QEVAL_CHECK(v.is_string(), "{} should be a string{}, found {}", what, expected.empty() ? "" : " (" + expected + ")",
              json_text(v));
  return v.get<std::string>();
}

inline bool spec_bool(const nlohmann::json& v, const std::string& what) {
  QEVAL_CHECK(v.is_boolean(), "{} should be true or false, found {}", what, json_text(v));
  return v.get<bool>();
}

}  // namespace qeval
