// llama.cpp's importance matrix in an evaluation (issue 77 item 4): reading one for a ggml scheme
// (eval --imatrix, or weights "imatrix" in a spec) and collecting one from a model (qeval imatrix),
// both as llama.cpp 0c1e57098 does (the copy llama-cpp-python 0.3.36 vendors).
//
// Collection is llama-imatrix's (tools/imatrix/imatrix.cpp, IMatrixCollector::collect_imatrix,
// compute_imatrix), run in full precision:
//   - the text tokenised whole with BOS first (when the tokenizer adds one), cut into chunks of
//     n_ctx tokens, the remainder dropped, the first token of every chunk replaced by BOS, at most
//     --chunks chunks, at least 2 · n_ctx tokens: qeval's protocol `llamacpp` (loaders/protocols/
//     protocol.h), which reproduces llama-perplexity's identical chunking;
//   - every token of every chunk collected (llama-imatrix asks for all logits, so no position is
//     skipped), the BOS included;
//   - every matrix product whose weight is named blk.* (the blocks' linears; not the head, as
//     without --process-output, nor the embedding, a row lookup): per input column Σ x² over the
//     tokens, accumulated in float32 token after token as llama.cpp adds them, and the count of
//     tokens; a routed expert tensor blk.N.ffn_*_exps.weight has one row of sums and one count per
//     expert, each (token, chosen expert) counted once (MUL_MAT_ID), an expert no token chose
//     holding zeros;
//   - the file: imatrix.datasets = [the data path as given], imatrix.chunk_count = chunks run,
//     imatrix.chunk_size = n_ctx.
// llama-imatrix also skips a dense product of fewer than 16 tokens in one call ("why are small
// batches ignored (<16 tokens)?"); n_ctx below 16 is refused here instead.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "eval/evaluator.h"
#include "loaders/checkpoints/imatrix_file.h"
#include "loaders/checkpoints/model_reader.h"
#include "model/config.h"
#include "quant/ggml_importance.h"

namespace qeval {

// The importance matrix `path` read for `config`'s tensors as llama-quantize looks them up
// (quant/ggml_importance.h): every linear and the token embedding by GGUF name. Throws naming the
// file, the tensor, the columns expected and found when an entry has another size (the token
// embedding excepted: llama-quantize ignores its entry then); a missing or broken file's error
// names the file. `description` is the record's section.
std::shared_ptr<const GgmlImportanceWeights> load_ggml_importance(const std::filesystem::path& path,
                                                                  const ModelConfig& config);

struct ImatrixCollection {
  std::int64_t n_ctx = 512;           // chunk length (llama-imatrix -c)
  std::int64_t batch_size = 1;        // windows per forward (the sums' order is the windows' either way)
  bool progress = true;
  std::string dataset;                // imatrix.datasets' entry: the data path as given
};

// Runs `model` in full precision over `windows` (protocol llamacpp's chunks) and returns the
// statistics llama-imatrix collects, keyed by GGUF tensor name.
Imatrix collect_imatrix(ModelReader& model, WindowSource& windows, const ImatrixCollection& options);

}  // namespace qeval
