// load_tokenizer: picks the tokenizer format from the path (folder contents or file name).
#include "loaders/tokenizers/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/error.h"
#include "common/files.h"
#include "loaders/tokenizers/gguf_tokenizer.h"
#include "loaders/tokenizers/gpt2_bpe.h"
#include "loaders/tokenizers/llama2c_tokenizer.h"
#include "loaders/tokenizers/sentencepiece_tokenizer.h"

namespace qeval {

namespace fs = std::filesystem;

std::size_t cut_before_space(std::string_view text, std::size_t limit) {
  for (std::size_t s = std::min(limit, text.size() > 0 ? text.size() - 1 : 0); s > 0; --s)
    if (text[s] == ' ' && text[s - 1] != ' ') return s;
  return 0;
}

namespace {

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// A tokenizer.json that is not byte-level BPE (e.g. a Llama folder's, which also ships
// tokenizer.model) is left to the next candidate.
bool is_byte_level_tokenizer_json(const fs::path& p) {
  try {
    const auto j = nlohmann::json::parse(read_file(p));
    const auto& pre = j.at("pre_tokenizer");
    return j.at("model").value("type", std::string("BPE")) == "BPE" && pre.is_object() &&
           pre.value("type", std::string()) == "ByteLevel";
  } catch (const std::exception&) {
    return false;
  }
}

std::unique_ptr<Tokenizer> load_from_folder(const fs::path& dir) {
  if (is_file(dir / "tokenizer.json") &&
      (is_byte_level_tokenizer_json(dir / "tokenizer.json") || !is_file(dir / "tokenizer.model"))) {
    return Gpt2BpeTokenizer::from_tokenizer_json(dir / "tokenizer.json");
  }
  if (is_file(dir / "vocab.json")) return Gpt2BpeTokenizer::from_vocab_and_merges(dir / "vocab.json", dir / "merges.txt");
  if (is_file(dir / "encoder.json")) {
    return Gpt2BpeTokenizer::from_vocab_and_merges(dir / "encoder.json", dir / "vocab.bpe");
  }
  if (is_file(dir / "tokenizer.model")) return SentencePieceTokenizer::load(dir / "tokenizer.model");
  if (is_file(dir / "tokenizer.bin")) return Llama2cTokenizer::load(dir / "tokenizer.bin");
  fail("{}: no tokenizer found in this folder: expected tokenizer.json, vocab.json + merges.txt, encoder.json + "
       "vocab.bpe, tokenizer.model or tokenizer.bin",
       dir.string());
}

// The merges file that goes with a vocabulary file: HF and OpenAI names, then whichever exists.
fs::path merges_beside(const fs::path& vocab) {
  const fs::path dir = vocab.parent_path();
  const std::string name = vocab.filename().string();
  if (name == "encoder.json") return dir / "vocab.bpe";
  if (name == "vocab.json") return dir / "merges.txt";
  return is_file(dir / "merges.txt") || !is_file(dir / "vocab.bpe") ? dir / "merges.txt" : dir / "vocab.bpe";
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return load_from_folder(path);
  QEVAL_CHECK(fs::exists(path, ec), "tokenizer {} does not exist", path.string());
  const std::string name = path.filename().string();
  const std::string ext = path.extension().string();
  if (ext == ".model") return SentencePieceTokenizer::load(path);
  if (ext == ".bin") return Llama2cTokenizer::load(path);
  if (ext == ".gguf" || ext == ".GGUF") return load_gguf_tokenizer(path);
  if (name == "tokenizer.json") return Gpt2BpeTokenizer::from_tokenizer_json(path);
  if (ext == ".json") {
    if (name != "encoder.json" && name != "vocab.json" && is_byte_level_tokenizer_json(path)) {
      return Gpt2BpeTokenizer::from_tokenizer_json(path);
    }
    return Gpt2BpeTokenizer::from_vocab_and_merges(path, merges_beside(path));
  }
  if (name == "vocab.bpe") return Gpt2BpeTokenizer::from_vocab_and_merges(path.parent_path() / "encoder.json", path);
  if (name == "merges.txt") return Gpt2BpeTokenizer::from_vocab_and_merges(path.parent_path() / "vocab.json", path);
  fail("cannot tell the tokenizer format of {}: expected a folder, tokenizer.json, encoder.json / vocab.json (with "
       "vocab.bpe / merges.txt beside it), a SentencePiece .model, a llama2.c tokenizer .bin or a .gguf",
       path.string());
}

}  // namespace qeval
