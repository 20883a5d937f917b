// llama.cpp's importance matrix in an evaluation (issue 77 item 4): reading one for a ggml scheme
// (eval --imatrix, or weights "imatrix" in a spec) as llama-quantize 0c1e57098 does.

#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "loaders/checkpoints/imatrix_file.h"
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

}  // namespace qeval
