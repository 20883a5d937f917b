// Each subcommand registers itself on the CLI11 app; its callback does the work and throws
// qeval::Error on failure (main prints one line and exits non-zero).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace qeval::cli {

// Exit status a command wants main() to return (check uses 1 for violations, 2 for bad input).
extern int exit_status;
// argv as given, for result records.
extern std::vector<std::string> command_line;

void add_eval_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_data_dir_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_merge_command(CLI::App& app);
void add_compare_command(CLI::App& app);
void add_check_command(CLI::App& app);
void add_plot_command(CLI::App& app);
void add_sensitivity_command(CLI::App& app);
void add_imatrix_command(CLI::App& app);
void add_hellaswag_command(CLI::App& app);

}  // namespace qeval::cli
