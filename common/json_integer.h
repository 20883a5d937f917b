// Integers read from JSON files.
//
// nlohmann's get<std::int64_t>() converts a floating-point value with a plain cast, which is
// undefined behaviour outside int64's range: a tokenizer.json whose added token had "id": 8.9e121
// stopped the tokenizer_json fuzzer under UBSan. Every integer a file supplies is read through
// here, so a float, a string or an integer above INT64_MAX is an error, never a conversion.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/error.h"

namespace qeval {

// The value when it is a JSON integer that fits int64; nullopt otherwise (floats included, even
// integral ones such as 3.0: a file that writes them is not one qeval wrote or a tool it reads).
inline std::optional<std::int64_t> json_int64(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  return std::nullopt;
}

// The value when it is a non-negative JSON integer (all of uint64's range); nullopt otherwise.
inline std::optional<std::uint64_t> json_uint64(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

// The value as int64, or qeval::Error "<what> should be an integer, found <value>"; `what` names
// the file and the field.
inline std::int64_t json_integer(const nlohmann::json& v, std::string_view what) {
  const auto n = json_int64(v);
  QEVAL_CHECK(n.has_value(), "{} should be an integer, found {}", what, v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return *n;
}

// The value as uint64, or qeval::Error "<what> should be a non-negative integer, found <value>".
inline std::uint64_t json_unsigned(const nlohmann::json& v, std::string_view what) {
  const auto n = json_uint64(v);
  QEVAL_CHECK(n.has_value(), "{} should be a non-negative integer, found {}", what, v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return *n;
}

}  // namespace qeval
