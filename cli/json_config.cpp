#include "cli/json_config.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "common/output_paths.h"
#include "common/printable.h"
#include "common/strict_json.h"

namespace qeval::cli {

std::vector<std::string> expand_json_config(const std::vector<std::string>& args, const CLI::App* app) {
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
    note_command_input("--config file", path);  // no output of the command may replace it
    // A key given twice would silently take one value: refused (common/strict_json.h).
    const nlohmann::json j = parse_json_strict(read_file(path), "--config " + path);
    QEVAL_CHECK(j.is_object(), "--config {}: expected a JSON object of option names to values, found {}", path,
                j.type_name());
    // The subcommand the file's options go to: each key must be one of its long options.
    const CLI::App* command = nullptr;
    if (app != nullptr)
      for (std::size_t k = 1; k < args.size() && command == nullptr; ++k)
        if (args[k].rfind("-", 0) != 0)
          for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; }))
            if (sub->check_name(args[k])) command = sub;
    for (const auto& [key, value] : j.items()) {
      QEVAL_CHECK(key != "config", "--config {}: a config file cannot name another (\"config\")", path);
      if (command != nullptr)
        QEVAL_CHECK(command->get_option_no_throw("--" + key) != nullptr,
                    "--config {}: unknown option {} for qeval {} (keys are long option names without dashes, e.g. "
                    "\"seq-len\")",
                    path, in_quotes(key), command->get_name());
      QEVAL_CHECK(!value.is_object() && !value.is_null(),
                  "--config {}: option {} is {}: expected a string, a number, true / false or a list", path,
                  in_quotes(key), json_text(value));
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
