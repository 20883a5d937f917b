#include "cli/json_config.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"

namespace qeval::cli {

std::vector<std::string> expand_json_config(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  std::vector<std::string> from_files;
  std::size_t insert_at = std::string::npos;  // right after the subcommand name
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string path;
    if (args[i] == "--config") {
      QEVAL_CHECK(i + 1 < args.size(), "--config needs a file name");
      path = args[++i];
    } else if (args[i].rfind("--config=", 0) == 0) {
      path = args[i].substr(9);
    } else {
      out.push_back(args[i]);
      if (insert_at == std::string::npos && i >= 1 && args[i].rfind("-", 0) != 0) insert_at = out.size();
      continue;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(path));
    } catch (const nlohmann::json::exception& e) {
      fail("--config {}: invalid JSON: {}", path, e.what());
    }
    QEVAL_CHECK(j.is_object(), "--config {}: expected a JSON object of option names to values, found {}", path,
                j.type_name());
    for (const auto& [key, value] : j.items()) {
      auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
      if (value.is_boolean()) {
        if (value.get<bool>()) from_files.push_back("--" + key);
      } else if (value.is_array()) {
        for (const auto& v : value) from_files.push_back("--" + key + "=" + text(v));
      } else {
        from_files.push_back("--" + key + "=" + text(value));
      }
    }
  }
  if (from_files.empty()) return out;
  if (insert_at == std::string::npos) insert_at = out.size();
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(insert_at), from_files.begin(), from_files.end());
  return out;
}

void add_json_config(CLI::App* cmd) {
  cmd->add_option("--config", "JSON file supplying any option by its long name (flags override it)");
}

}  // namespace qeval::cli
