// qeval: how much does a checkpoint lose under basic quantisation, and why?
#include <ATen/Parallel.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

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

namespace {

// The option whose value `path` is, or lies in ("--plots DIR" for DIR/figure_data.json): a raw
// filesystem error names the option that gave the path, with the path shortened.
std::string option_of_path(const std::vector<std::string>& args, const std::string& path) {
  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string option = args[i], value;
    if (option.rfind("--", 0) != 0) continue;
    if (const auto eq = option.find('='); eq != std::string::npos) {
      value = option.substr(eq + 1);
      option.resize(eq);
    } else if (i + 1 < args.size()) {
      value = args[i + 1];
    }
    if (!value.empty() && path.compare(0, value.size(), value) == 0) return option + " ";
  }
  return "";
}

}  // namespace

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
  qeval::cli::add_imatrix_command(app);
  qeval::cli::add_hellaswag_command(app);
  // An unknown command is named, with the ones there are (CLI11 would only say that "evl" was not expected).
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      found = found || sub->check_name(argv[1]);
      known += (known.empty() ? "" : ", ") + sub->get_name();
    }
    if (!found) {
      std::fprintf(stderr, "qeval: error: unknown command %s: expected one of %s (see --help)\n",
                   qeval::in_quotes(argv[1]).c_str(), known.c_str());
      return 2;
    }
  }
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
  } catch (const nlohmann::json::exception& e) {
    // A reader that let nlohmann's own words through ("type must be number, but is string"): never
    // bare; the JSON files of the command line are named (each reader names its file and key path).
    std::string files;
    for (std::size_t i = 1; i < args.size(); ++i)
      if (const auto at = args[i].rfind(".json"); at != std::string::npos && at + 5 == args[i].size())
        files += (files.empty() ? "" : ", ") + qeval::printable(args[i].substr(args[i].find('=') + 1), 120);
    std::fprintf(stderr, "qeval: error: %s%sa JSON value has the wrong type or a key is missing: %s\n", files.c_str(),
                 files.empty() ? "" : ": ", qeval::clean_message(e.what()).c_str());
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // "filesystem error: cannot create directories: File name too long [300 bytes]" said as qeval says things.
    const std::string path = e.path1().string();
    std::fprintf(stderr, "qeval: error: %s%s: %s\n", option_of_path(args, path).c_str(),
                 qeval::printable(path, 120).c_str(), e.code().message().c_str());
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
