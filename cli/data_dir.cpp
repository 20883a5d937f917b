// `qeval data-dir`: prints the data folder qeval resolves (--data-dir, QEVAL_DATA_DIR, default).
#include <fmt/core.h>

#include "cli/commands.h"
#include "common/files.h"

namespace qeval::cli {

void add_data_dir_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("data-dir", "print the folder of shared models, tokenizers and text");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("--data-dir", *dir, "data folder (default: $QEVAL_DATA_DIR, else ../shared/data)");
  cmd->callback([dir] {
    fmt::print("{}\n", resolve_data_dir(dir->empty() ? std::nullopt : std::optional<std::string>(*dir)).string());
  });
}

}  // namespace qeval::cli
