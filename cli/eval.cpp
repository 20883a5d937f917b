#include "cli/commands.h"
#include "common/error.h"
namespace qeval::cli {
void add_eval_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "perplexity of a model on validation text (not yet implemented)");
  cmd->callback([] { fail("eval: not implemented yet"); });
}
}  // namespace qeval::cli
