// `qeval imatrix`: llama.cpp's importance matrix collected from a model in full precision, as
// llama-imatrix (llama.cpp 0c1e57098) collects it (eval/ggml_imatrix.h), written in its GGUF
// format (or the legacy .dat) for `qeval eval --imatrix` and llama-quantize --imatrix.
#include <fmt/core.h>

#include <algorithm>
#include <memory>

#include "cli/commands.h"
#include "cli/eval_setup.h"
#include "cli/option_checks.h"
#include "common/error.h"
#include "common/files.h"
#include "common/output_paths.h"
#include "eval/ggml_imatrix.h"
#include "loaders/checkpoints/imatrix_file.h"

namespace qeval::cli {
namespace {

struct ImatrixArgs {
  EvalDataArgs data;
  std::int64_t chunks = -1;  // llama-imatrix --chunks; -1: every whole chunk of the text
  std::string out;
  std::string output_format = "gguf";
  bool quiet = false;
};

void run_imatrix(ImatrixArgs& a) {
  QEVAL_CHECK(a.data.protocol == "llamacpp", "imatrix: the data is cut as llama-imatrix cuts it (protocol llamacpp: "
              "chunks of --seq-len tokens, BOS first); --protocol {} is not that; leave it out", a.data.protocol);
  if (a.data.seq_len == 0) a.data.seq_len = 512;  // llama-imatrix's default -c
  if (a.chunks > 0) a.data.max_windows = a.chunks;
  check_output_file(a.out, "--out");
  EvalInputs inputs = prepare_eval_inputs(a.data);
  check_outputs_apart({{"--out", a.out}}, eval_read_paths(a.data, inputs, ""));
  ImatrixCollection options;
  options.n_ctx = inputs.protocol.seq_len;
  options.batch_size = a.data.batch_size;
  options.progress = !a.quiet;
  options.dataset = a.data.data;
  Imatrix m;
  try {
    m = collect_imatrix(*inputs.model, *inputs.windows, options);
  } catch (const Error& e) {
    // The chunking's own errors ("protocol llamacpp: 12 tokens give 0 chunk(s)") are about the text: name it.
    const std::string message = e.what();
    if (message.rfind("protocol ", 0) == 0) fail("--data {}: {}", a.data.data, message);
    throw;
  }
  QEVAL_CHECK(inputs.windows->stream_tokens() >= 2 * options.n_ctx,
              "imatrix: {} tokens in {}; llama-imatrix needs at least 2 * n_ctx = {}", inputs.windows->stream_tokens(),
              a.data.data, 2 * options.n_ctx);
  if (a.output_format == "dat")
    write_imatrix_legacy(m, a.out);
  else
    write_imatrix_gguf(m, a.out);
  std::int64_t tokens = 0;
  for (const auto& [name, e] : m.entries) tokens = std::max(tokens, e.counts.empty() ? std::int64_t{0} : e.counts[0]);
  fmt::print(stderr, "imatrix: {} entries from {} chunks of {} tokens ({} tokens per dense tensor) written to {}\n",
             m.entries.size(), m.chunk_count, m.chunk_size, tokens, a.out);
}

}  // namespace

void add_imatrix_command(CLI::App& app) {
  auto args = std::make_shared<ImatrixArgs>();
  args->data.protocol = "llamacpp";
  auto* cmd = app.add_subcommand(
      "imatrix", "collect llama.cpp's importance matrix (Σx² per input column of every block linear) as llama-imatrix does");
  add_eval_data_options(cmd, args->data);
  cmd->add_option("--chunks", args->chunks, "at most this many chunks of --seq-len tokens (llama-imatrix --chunks); "
                  "default: every whole chunk")->check(integer_in(1));
  cmd->add_option("--out,-o", args->out, "the importance matrix file to write")->required()->check(output_path());
  cmd->add_option("--output-format", args->output_format, "gguf (llama.cpp's default) or dat (legacy)")
      ->capture_default_str()->check(CLI::IsMember({"gguf", "dat"}));
  cmd->add_flag("--quiet,-q", args->quiet, "no progress on stderr");
  cmd->callback([args] { run_imatrix(*args); });
}

}  // namespace qeval::cli
