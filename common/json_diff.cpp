#include "common/json_diff.h"

#include <fmt/format.h>

#include <map>

namespace qeval {
namespace {

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
        out.push_back(fmt::format("{}: {} vs {}", sub, where == 1 ? a[k].dump() : "(absent)",
                                  where == 2 ? b[k].dump() : "(absent)"));
    }
    return;
  }
  out.push_back(fmt::format("{}: {} vs {}", path.empty() ? "(value)" : path, a.dump(), b.dump()));
}

}  // namespace

std::vector<std::string> json_differences(const nlohmann::json& a, const nlohmann::json& b, std::size_t limit) {
  std::vector<std::string> out;
  differences(a, b, "", out, limit);
  return out;
}

}  // namespace qeval
