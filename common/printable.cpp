#include "common/printable.h"

#include <fmt/format.h>

namespace qeval {
namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 when it is not one.
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  std::size_t n = 0;
  unsigned min = 0;
  unsigned code = 0;
  if (c >= 0xC2 && c <= 0xDF) n = 2, min = 0x80, code = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, min = 0x800, code = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, min = 0x10000, code = c & 0x07;
  else return 0;
  if (i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string printable(std::string_view text, std::size_t limit) {
  std::string out;
  const std::size_t shown = std::min(text.size(), limit);
  for (std::size_t i = 0; i < shown;) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    switch (c) {
      case '\n': out += "\\n"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\0': out += "\\0"; ++i; continue;
      default: break;
    }
    if (const std::size_t n = c >= 0x80 ? utf8_length(text, i) : 0; n > 0 && i + n <= text.size()) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    out += fmt::format("\\x{:02x}", c);
    ++i;
  }
  if (shown < text.size()) out += fmt::format("… ({} bytes)", text.size());
  return out;
}

std::string utf8_escaped(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = c < 0x80 ? 1 : utf8_length(text, i);
    if (n > 0) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    }
  }
  return out;
}

nlohmann::json utf8_safe(const nlohmann::json& value) {
  if (value.is_string()) return utf8_escaped(value.get_ref<const std::string&>());
  if (value.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : value) out.push_back(utf8_safe(v));
    return out;
  }
  if (value.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, v] : value.items()) out[utf8_escaped(key)] = utf8_safe(v);
    return out;
  }
  return value;
}

std::string json_dump(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool has_control_byte(std::string_view text) {
  for (char c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) return true;
  return false;
}

std::string in_quotes(std::string_view text, std::size_t limit) { return "\"" + printable(text, limit) + "\""; }

std::string json_text(const nlohmann::json& value, std::size_t limit) {
  return printable(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), limit);
}

std::string markdown_cell(std::string_view text) {
  std::string out;
  for (char c : printable(text, std::string_view::npos)) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string csv_field(std::string_view text) {
  std::string s(text);
  if (!s.empty() && (s[0] == '=' || s[0] == '+' || s[0] == '-' || s[0] == '@' || s[0] == '\t' || s[0] == '\r'))
    s.insert(s.begin(), '\'');
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv_value(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_string()) return csv_field(v.get<std::string>());
  return v.dump();  // shortest round-trip form
}

}  // namespace qeval
