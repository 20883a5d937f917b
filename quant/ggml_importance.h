// llama.cpp's importance matrix as the ggml weights of one scheme use it (issue 77 item 4): the
// per-column weights llama-quantize hands to ggml_quantize_chunk, looked up per tensor by its GGUF
// name. eval/ggml_imatrix.h reads the file (loaders/checkpoints/imatrix_file.h) and fills this in;
// QuantizedLinear and SchemeRewrite's embedding read it.
//
// llama-quantize (llama.cpp 0c1e57098, src/llama-quant.cpp llama_model_quantize_impl), per tensor:
//   - the file's entry of the tensor's GGUF name (blk.3.ffn_down.weight, token_embd.weight ...);
//   - none: the tensor is quantised without ("did not find weights for ...");
//   - one of another size than columns × experts: an error, except for token_embd.weight, which
//     is then quantised without (llama.cpp: "tok_embd should be ignored in this case");
//   - Q8_0 and MXFP4 never read it (ggml_type_uses_importance).
// A 3-D expert tensor's entry holds one row per expert; qeval's per-expert linear takes row e.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace qeval {

struct GgmlImportanceWeights {
  // By qeval name (a linear, or "token_embedding"): [K] float32, K the tensor's columns. Only
  // tensors the file has an entry for (of the right size).
  std::map<std::string, at::Tensor> by_name;
  // The record's "imatrix" section: {"file", "hash", "format", "datasets", "chunk_count",
  // "chunk_size", "entries", "tensors_with", "tensors_without": [...]} (eval/ggml_imatrix.h).
  nlohmann::json description;

  // The weights for `name`, or an undefined tensor when the tensor is quantised without.
  at::Tensor find(const std::string& name) const {
    const auto it = by_name.find(name);
    return it == by_name.end() ? at::Tensor() : it->second;
  }
};

}  // namespace qeval
