#include "loaders/tokenizers/tokenizer_discovery.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "loaders/tokenizers/gguf_tokenizer.h"

namespace fs = std::filesystem;

namespace qeval {

std::optional<fs::path> find_tokenizer_beside(const fs::path& checkpoint) {
  std::error_code ec;
  std::string ext = checkpoint.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".gguf" && fs::is_regular_file(checkpoint, ec) && gguf_has_tokenizer(checkpoint)) return checkpoint;
  fs::path dir = fs::is_directory(checkpoint, ec) ? checkpoint : checkpoint.parent_path();
  if (dir.empty()) dir = ".";
  for (const char* name : {"tokenizer.json", "vocab.json", "encoder.json", "tokenizer.model"}) {
    if (fs::exists(dir / name, ec)) return dir / name;
  }
  auto single = [&](auto accept) -> std::optional<fs::path> {
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.is_regular_file() && entry.path() != checkpoint && accept(entry.path())) found.push_back(entry.path());
    if (found.size() == 1) return found.front();
    return std::nullopt;
  };
  if (auto m = single([](const fs::path& p) { return p.extension() == ".model"; })) return m;
  if (fs::exists(dir / "tokenizer.bin", ec)) return dir / "tokenizer.bin";
  return single([](const fs::path& p) { return p.extension() == ".bin" && p.filename().string().rfind("tok", 0) == 0; });
}

}  // namespace qeval
