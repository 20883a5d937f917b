// --config FILE.json for every subcommand: a JSON object whose keys are long option names
// (without dashes, e.g. {"model": "...", "schemes": "full,int8-fine", "seq-len": 256});
// flags given on the command line override it. Arrays become repeated values.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace qeval::cli {

class JsonConfig : public CLI::Config {
 public:
  std::string to_config(const CLI::App* app, bool default_also, bool, std::string) const override {
    nlohmann::json j = nlohmann::json::object();
    for (const CLI::Option* opt : app->get_options({})) {
      if (opt->get_lnames().empty() || !opt->get_configurable()) continue;
      std::string name = opt->get_lnames().front();
      if (opt->count() > 0) {
        auto values = opt->results();
        j[name] = values.size() == 1 ? nlohmann::json(values.front()) : nlohmann::json(values);
      } else if (default_also && !opt->get_default_str().empty()) {
        j[name] = opt->get_default_str();
      }
    }
    return j.dump(2);
  }

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(input);
    } catch (const nlohmann::json::exception& e) {
      throw CLI::ConversionError("--config: invalid JSON: " + std::string(e.what()));
    }
    if (!j.is_object()) throw CLI::ConversionError("--config: expected a JSON object of option names to values");
    std::vector<CLI::ConfigItem> items;
    for (auto& [key, value] : j.items()) {
      CLI::ConfigItem item;
      item.name = key;
      auto text = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
      if (value.is_array()) {
        for (const auto& v : value) item.inputs.push_back(text(v));
      } else if (value.is_boolean()) {
        item.inputs.push_back(value.get<bool>() ? "true" : "false");
      } else {
        item.inputs.push_back(text(value));
      }
      items.push_back(std::move(item));
    }
    return items;
  }
};

// Adds --config to a subcommand, read as JSON.
inline void add_json_config(CLI::App* cmd) {
  cmd->config_formatter(std::make_shared<JsonConfig>());
  cmd->set_config("--config", "", "JSON file supplying any option (flags override it)");
}

}  // namespace qeval::cli
