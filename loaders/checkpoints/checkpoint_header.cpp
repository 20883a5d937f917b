#include "loaders/checkpoints/checkpoint_header.h"

#include <fmt/format.h>

#include <fstream>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "loaders/checkpoints/gguf.h"
#include "loaders/checkpoints/gguf_config.h"
#include "loaders/checkpoints/hf_config.h"
#include "loaders/checkpoints/safetensors_set.h"

namespace qeval {

namespace fs = std::filesystem;

namespace {

void add_safetensors(CheckpointHeader& out, const fs::path& dir) {
  SafetensorsSet set = open_safetensors_folder(dir);  // headers only: tensors are read on demand
  for (const auto& file : set.files()) {
    out.bytes += qeval::file_size(file->path());
    for (const auto& name : file->names()) {
      const SafetensorsTensorInfo& info = file->info(name);
      out.tensors.push_back({name, info.dtype, info.shape, file->path().filename().string()});
    }
  }
}

// config.json of a folder (qeval's own or Hugging Face) → out.format, out.config.
void read_folder_config(CheckpointHeader& out, const fs::path& dir) {
  const fs::path config_path = dir / "config.json";
  QEVAL_CHECK(fs::is_regular_file(config_path), "{}: a checkpoint folder needs config.json", dir.string());
  const nlohmann::json j = read_json_file(config_path);
  QEVAL_CHECK(j.is_object(), "{}: expected a JSON object, found {}", config_path.string(), j.type_name());
  QEVAL_CHECK(j.contains("format") || j.contains("architectures") || j.contains("model_type"),
              "{}: neither \"format\": \"qeval\" nor Hugging Face \"architectures\"/\"model_type\"", config_path.string());
  if (j.contains("format")) {
    QEVAL_CHECK(j["format"] == "qeval", "{}: unknown \"format\"; expected \"qeval\" (or no \"format\" for Hugging Face "
                "configs)", config_path.string());
    out.format = "qeval";
    out.config = config_from_json(j, config_path.string());
  } else {
    HfModel m = read_hf_model_config(j, config_path.string(), out.notes);
    out.format = m.format;
    out.config = m.config;
    out.notes["architecture"] = m.architecture;
  }
}

constexpr const char* kTorchNote =
    "not listed: a torch.save archive keeps its shapes in the pickle, which inspect does not read";

CheckpointHeader folder_header(const fs::path& dir) {
  CheckpointHeader out;
  read_folder_config(out, dir);
  if (!fs::exists(dir / "model.safetensors") && !fs::exists(dir / "model.safetensors.index.json") &&
      fs::exists(dir / "pytorch_model.bin")) {
    out.format = "torch-" + out.format;
    out.bytes = qeval::file_size(dir / "pytorch_model.bin");
    out.notes["tensors"] = kTorchNote;
    return out;
  }
  add_safetensors(out, dir);
  return out;
}

CheckpointHeader gguf_header(const fs::path& path) {
  GgufFile f(path);  // metadata and tensor table; tensor data is read on demand only
  CheckpointHeader out;
  out.format = "gguf";
  out.config = gguf_model_config(f);
  out.bytes = qeval::file_size(path);
  for (const auto& t : f.tensors()) out.tensors.push_back({t.name, ggml_type_name(t.type), t.shape(), path.filename().string()});
  out.notes["gguf_version"] = f.version();
  if (f.has("general.name") && f.metadata()["general.name"].is_string()) out.notes["general.name"] = f.metadata()["general.name"];
  return out;
}

CheckpointHeader llama2c_header(const fs::path& path) {
  const Llama2cHeader h = read_llama2c_header(path);  // also checks the file's size against the header
  CheckpointHeader out;
  out.format = "llama2c";
  out.config = h.config;
  out.bytes = qeval::file_size(path);
  const ModelConfig& c = h.config;
  const std::int64_t D = c.d_model, F = c.d_ff, L = c.n_layers, KV = D * c.n_kv_heads / c.n_heads;
  const std::string file = path.filename().string();
  for (auto [name, shape] : std::vector<std::pair<const char*, std::vector<std::int64_t>>>{
           {"tok_emb", {c.vocab_size, D}}, {"rms_att", {L, D}},     {"wq", {L, D, D}},    {"wk", {L, KV, D}},
           {"wv", {L, KV, D}},             {"wo", {L, D, D}},       {"rms_ffn", {L, D}},  {"w1", {L, F, D}},
           {"w2", {L, D, F}},              {"w3", {L, F, D}},       {"rms_final", {D}}})
    out.tensors.push_back({name, "F32", shape, file});
  if (!h.shared_classifier) out.tensors.push_back({"wcls", "F32", {c.vocab_size, D}, file});
  out.notes["shared_classifier"] = h.shared_classifier;
  return out;
}

}  // namespace

CheckpointHeader read_checkpoint_header(const fs::path& path) {
  std::error_code ec;
  QEVAL_CHECK(fs::exists(path, ec), "checkpoint {} does not exist", path.string());
  if (fs::is_directory(path, ec)) return folder_header(path);
  if (path.filename() == "config.json") return folder_header(path.has_parent_path() ? path.parent_path() : ".");
  std::string magic(4, '\0');
  {
    std::ifstream in(path, std::ios::binary);
    QEVAL_CHECK(in.good(), "cannot open checkpoint {}", path.string());
    in.read(magic.data(), 4);
    magic.resize(static_cast<std::size_t>(in.gcount()));
  }
  const std::string ext = path.extension().string();
  if (magic == "GGUF" || ext == ".gguf") return gguf_header(path);
  if (magic == std::string("PK\x03\x04", 4) || ext == ".pt" || ext == ".pth") {
    CheckpointHeader out;
    read_folder_config(out, path.has_parent_path() ? path.parent_path() : fs::path("."));
    out.format = "torch-" + out.format;
    out.bytes = qeval::file_size(path);
    out.notes["tensors"] = kTorchNote;
    return out;
  }
  if (ext == ".bin") return llama2c_header(path);
  fail("{}: unrecognised checkpoint (extension \"{}\"); inspect reads folders with config.json, .gguf, llama2.c .bin and "
       "torch.save archives with a config.json beside them",
       path.string(), ext);
}

}  // namespace qeval
