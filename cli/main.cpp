// qeval: how much does a checkpoint lose under basic quantisation, and why?
#include <ATen/Parallel.h>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "cli/json_config.h"
#include "common/build_info.h"
#include "common/error.h"
#include "common/memory.h"
#include "common/printable.h"

namespace qeval::cli {
int exit_status = 0;
std::vector<std::string> command_line;
}

int main(int argc, char** argv) {
  // common/memory.h: no page faults on every window's logits under glibc's malloc; with jemalloc
  // linked (CMakeLists.txt) malloc is jemalloc's and glibc's settings change nothing.
  qeval::keep_freed_memory_for_reuse();
  qeval::cli::command_line.assign(argv, argv + argc);
  CLI::App app{"qeval: perplexity and outlier statistics of language models under int8 / 4-bit quantisation"};
  app.set_version_flag("--version", "qeval " + qeval::version() + " (" + qeval::git_commit() + ")");
  app.require_subcommand(1);
  // A later value overrides an earlier one: --config values come first, typed flags after.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  qeval::cli::add_eval_command(app);
  qeval::cli::add_inspect_command(app);
  qeval::cli::add_data_dir_command(app);
  qeval::cli::add_train_command(app);
  qeval::cli::add_merge_command(app);
  qeval::cli::add_compare_command(app);
  qeval::cli::add_check_command(app);
  qeval::cli::add_plot_command(app);
  qeval::cli::add_sensitivity_command(app);
  std::vector<std::string> args;
  try {
    // --config files name options of the subcommand: expanded with the app at hand to check them.
    args = qeval::cli::expand_json_config(qeval::cli::command_line, &app);
  } catch (const qeval::Error& e) {
    std::fprintf(stderr, "qeval: error: %s\n", e.what());
    return 2;
  }
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);  // CLI11 takes them reversed, without argv[0]
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    // --help and --version succeed; every other parse error is bad input, exit 2 like the rest.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "qeval: error: %s (see --help)\n", qeval::printable(e.what(), 2000).c_str());
    return 2;
  } catch (const qeval::Error& e) {
    std::fprintf(stderr, "qeval: error: %s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "qeval: error: %s\n", e.what_without_backtrace());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qeval: error: %s\n", e.what());
    return 2;
  }
  return qeval::cli::exit_status;
}
