// load_checkpoint: picks the format from what the path is and holds, then hands over to the
// format's loader. Also the helpers the loaders share (JSON files, weights hash).
#include "loaders/checkpoints/checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>

#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "loaders/checkpoints/model_reader_internal.h"

namespace qeval {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSupported =
    "a folder with config.json (Hugging Face GPT2LMHeadModel / LlamaForCausalLM with model.safetensors or "
    "sharded model.safetensors.index.json, or qeval's own with \"format\": \"qeval\"), a llama2.c v0 .bin, "
    "a torch.save zip state dict (.bin, .pt, .pth) with a Hugging Face config.json beside it, or a GGUF v3 .gguf";

std::string first_bytes(const fs::path& path, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  QEVAL_CHECK(in.good(), "cannot open checkpoint {}", path.string());
  std::string bytes(n, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(n));
  bytes.resize(static_cast<std::size_t>(in.gcount()));
  return bytes;
}

std::unique_ptr<ModelReader> open_folder(const fs::path& dir) {
  const fs::path config_path = dir / "config.json";
  QEVAL_CHECK(fs::is_regular_file(config_path), "{}: a checkpoint folder needs config.json; supported checkpoints: {}",
              dir.string(), kSupported);
  nlohmann::json config = read_json_file(config_path);
  QEVAL_CHECK(config.is_object(), "{}: expected a JSON object, found {}", config_path.string(), config.type_name());
  if (config.contains("format")) {
    const auto& format = config["format"];
    QEVAL_CHECK(format.is_string() && format.get<std::string>() == "qeval",
                "{}: unknown \"format\" {}; expected \"qeval\" (or no \"format\" for Hugging Face configs)",
                config_path.string(), format.dump());
    return open_qeval_checkpoint(dir);
  }
  if (config.contains("architectures") || config.contains("model_type")) {
    // Hugging Face folders written by torch.save only (no safetensors) load through the state dict.
    if (!fs::exists(dir / "model.safetensors") && !fs::exists(dir / "model.safetensors.index.json") &&
        fs::exists(dir / "pytorch_model.bin"))
      return open_torch_checkpoint(dir / "pytorch_model.bin");
    return open_hf_checkpoint(dir);
  }
  fail("{}: neither \"format\": \"qeval\" nor Hugging Face \"architectures\"/\"model_type\"; supported checkpoints: {}",
       config_path.string(), kSupported);
}

}  // namespace

LoadedCheckpoint load_checkpoint(const fs::path& path) { return open_checkpoint(path)->read_all(); }

std::unique_ptr<ModelReader> open_checkpoint(const fs::path& path) {
  std::error_code ec;
  QEVAL_CHECK(fs::exists(path, ec), "checkpoint {} does not exist; supported checkpoints: {}", path.string(),
              kSupported);
  if (fs::is_directory(path, ec)) return open_folder(path);
  if (path.filename() == "config.json") return open_folder(path.has_parent_path() ? path.parent_path() : ".");

  const std::string magic = first_bytes(path, 4);
  const std::string ext = path.extension().string();
  if (magic == "GGUF" || ext == ".gguf") return open_gguf_checkpoint(path);
  if (magic == std::string("PK\x03\x04", 4) || ext == ".pt" || ext == ".pth")
    return open_torch_checkpoint(path);
  if (ext == ".bin") return open_llama2c_checkpoint(path);
  if (ext == ".safetensors")
    fail("{}: a safetensors file alone has no model config; pass the folder that holds it with its config.json",
         path.string());
  fail("{}: unrecognised checkpoint (extension \"{}\"); supported checkpoints: {}", path.string(), ext, kSupported);
}

namespace {

// Python's json.dumps writes float('inf') and nan as the bare words Infinity, -Infinity and NaN,
// which JSON does not have (HF's Mamba2Config writes time_step_limit [0.0, Infinity]). Outside
// strings they become the strings "Infinity", "-Infinity" and "NaN", which readers then interpret.
std::string quote_python_literals(const std::string& text) {
  std::string out;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      out += ch;
      if (ch == '\\' && i + 1 < text.size()) out += text[++i];
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    bool replaced = false;
    for (const char* word : {"-Infinity", "Infinity", "NaN"}) {
      const std::size_t n = std::char_traits<char>::length(word);
      if (text.compare(i, n, word) == 0) {
        out += std::string("\"") + word + "\"";
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += ch;
  }
  return out;
}

}  // namespace

nlohmann::json read_json_file(const fs::path& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    try {
      return nlohmann::json::parse(quote_python_literals(text));
    } catch (const nlohmann::json::exception&) {
    }
    fail("{}: malformed JSON: {}", path.string(), e.what());
  }
}

std::string shape_string(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace qeval
