#include "common/json_diff.h"

#include <fmt/format.h>

#include <map>

#include "common/printable.h"

namespace qeval {
namespace {

// A value in a message: compact, printable, at most 120 bytes (a whole model config is not a key).
std::string shown(const nlohmann::json& v) { return json_text(v, 120); }

void differences(const nlohmann::json& a, const nlohmann::json& b, const std::string& path,
                 std::vector<std::string>& out, std::size_t limit) {
  if (out.size() >= limit || a == b) return;
  if (a.is_object() && b.is_object()) {
    std::map<std::string, int> keys;
    for (const auto& [k, v] : a.items()) keys[k] |= 1;
    for (const auto& [k, v] : b.items()) keys[k] |= 2;
    for (const auto& [k, where] : keys) {
      std::string sub = path.empty() ? k : path + "." + k;
      if (where == 3)
        differences(a[k], b[k], sub, out, limit);
      else if (out.size() < limit)
        out.push_back(fmt::format("{}: {} vs {}", sub, where == 1 ? shown(a[k]) : "(absent)",
                                  where == 2 ? shown(b[k]) : "(absent)"));
    }
    return;
  }
  // Lists of the same length (schemes, layers) element by element, so the key that differs is named,
  // not the whole list.
  if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (std::size_t i = 0; i < a.size(); ++i) differences(a[i], b[i], fmt::format("{}[{}]", path, i), out, limit);
    return;
  }
  out.push_back(fmt::format("{}: {} vs {}", path.empty() ? "(value)" : path, shown(a), shown(b)));
}

}  // namespace

std::vector<std::string> json_differences(const nlohmann::json& a, const nlohmann::json& b, std::size_t limit) {
  std::vector<std::string> out;
  differences(a, b, "", out, limit);
  return out;
}

}  // namespace qeval
