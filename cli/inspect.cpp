#include "cli/commands.h"
#include "common/error.h"
namespace qeval::cli {
void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "what a checkpoint, tokenizer or data file holds (not yet implemented)");
  cmd->callback([] { fail("inspect: not implemented yet"); });
}
}  // namespace qeval::cli
