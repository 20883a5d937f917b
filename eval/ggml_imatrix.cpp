#include "eval/ggml_imatrix.h"

#include <fmt/format.h>

#include <map>
#include <vector>

#include "common/error.h"
#include "common/hash.h"
#include "model/block.h"
#include "quant/schemes/ggml_rules.h"

namespace qeval {

std::shared_ptr<const GgmlImportanceWeights> load_ggml_importance(const std::filesystem::path& path,
                                                                  const ModelConfig& config) {
  std::error_code ec;
  QEVAL_CHECK(std::filesystem::is_regular_file(path, ec),
              "imatrix {}: no such file (a llama.cpp importance matrix, GGUF or legacy .dat)", path.string());
  const Imatrix file = read_imatrix(path);
  const GgmlImportance importance = ggml_importance(file, path);
  auto out = std::make_shared<GgmlImportanceWeights>();
  std::vector<std::string> names = model_linear_names(config);
  names.insert(names.begin(), "token_embedding");
  nlohmann::json without = nlohmann::json::array();
  std::int64_t with = 0;
  for (const std::string& name : names) {
    const GgufTensorRef ref = gguf_tensor_of(name, config.tied_embeddings);
    const std::int64_t columns = name == "token_embedding" ? config.d_model : linear_shape(config, name).in;
    const std::int64_t experts = ref.expert >= 0 ? config.moe_experts : 1;
    const GgmlImportanceEntry* e = importance.find(ref.name);
    // llama-quantize ignores a token_embd entry of another size and refuses any other.
    const bool usable = e != nullptr && (ref.name != "token_embd.weight" ||
                                         static_cast<std::int64_t>(e->values.size()) == experts * columns);
    if (!usable) {
      without.push_back(name);
      continue;
    }
    const at::Tensor rows = importance.tensor_for(ref.name, experts, columns);  // [experts, columns]
    out->by_name[name] = rows[ref.expert >= 0 ? ref.expert : 0].contiguous();
    ++with;
  }
  out->description = {{"file", path.string()},
                      {"hash", hash_file(path)},
                      {"format", file.legacy ? "legacy" : "gguf"},
                      {"datasets", file.datasets},
                      {"chunk_count", file.chunk_count},
                      {"chunk_size", file.chunk_size},
                      {"entries", file.entries.size()},
                      {"tensors_with", with},
                      {"tensors_without", without}};
  return out;
}

}  // namespace qeval
