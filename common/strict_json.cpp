#include "common/strict_json.h"

#include <set>
#include <vector>

#include "common/error.h"
#include "common/printable.h"

namespace qeval {

nlohmann::json parse_json_strict(const std::string& text, const std::string& source) {
  std::vector<std::set<std::string>> keys;  // one set per object being parsed
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) keys.emplace_back();
    if (event == E::object_end && !keys.empty()) keys.pop_back();
    if (event == E::key && !keys.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      QEVAL_CHECK(keys.back().insert(key).second, "{}: key {} appears twice in one object (only one would count)",
                  source, in_quotes(key));
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", source, e.what());
  }
}

}  // namespace qeval
