// --config FILE.json for every subcommand: a JSON object whose keys are long option names
// (without dashes, e.g. {"model": "...", "schemes": "full,int8-fine", "seq-len": 256, "quiet": true}).
// The file's options are spliced into the command line right after the subcommand, before the
// flags the user typed; options take the last value given, so typed flags override the file.
// (CLI11 2.1 does not read config files for subcommands itself.)
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace qeval::cli {

// Returns argv with every `--config FILE` (or `--config=FILE`) replaced by the file's options.
// Throws qeval::Error naming the file on unreadable or invalid JSON, a key given twice, and (when
// `app` is given) a key that is not a long option of the subcommand, naming the key.
std::vector<std::string> expand_json_config(const std::vector<std::string>& args, const CLI::App* app = nullptr);

// Documents --config in a subcommand's --help (the option itself is consumed before parsing).
void add_json_config(CLI::App* cmd);

}  // namespace qeval::cli
