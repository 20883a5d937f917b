// Reading GPT-2 BPE vocabularies: encoder.json/vocab.json + vocab.bpe/merges.txt, and the
// Hugging Face tokenizer.json (model BPE, pre-tokenizer ByteLevel). Every refusal names the
// file and the field.
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "common/json_integer.h"
#include "loaders/tokenizers/gpt2_bpe.h"

namespace qeval {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json parse_json_file(const fs::path& path) {
  QEVAL_CHECK(fs::is_regular_file(path), "tokenizer file {} does not exist or is not a file", path.string());
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

std::vector<std::pair<std::string, std::int32_t>> read_vocab_object(const json& j, const std::string& where) {
  QEVAL_CHECK(j.is_object(), "{}: expected a JSON object of token -> id, found {}", where, j.type_name());
  std::vector<std::pair<std::string, std::int32_t>> vocab;
  vocab.reserve(j.size());
  for (const auto& [symbol, id] : j.items()) {
    const auto value = json_integer(id, fmt::format("{}: the id of token '{}'", where, symbol));
    QEVAL_CHECK(value >= 0 && value <= INT32_MAX, "{}: token '{}' has id {}, expected a non-negative int32",
                where, symbol, value);
    vocab.emplace_back(symbol, static_cast<std::int32_t>(value));
  }
  return vocab;
}

// "a b" -> {a, b}: exactly one space, both sides non-empty (the byte table has no space).
std::pair<std::string, std::string> split_merge(std::string_view line, const std::string& where, std::size_t lineno) {
  const auto space = line.find(' ');
  QEVAL_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                  line.find(' ', space + 1) == std::string_view::npos,
              "{}: line {}: expected two symbols separated by one space, found '{}'", where, lineno, line);
  return {std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
}

}  // namespace

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_vocab_and_merges(const fs::path& vocab_json,
                                                                          const fs::path& merges_txt) {
  QEVAL_CHECK(fs::is_regular_file(merges_txt), "GPT-2 BPE vocabulary {} needs its merges file {}, which is missing",
              vocab_json.string(), merges_txt.string());
  Spec spec;
  spec.source = vocab_json.string() + " + " + merges_txt.filename().string();
  spec.vocab = read_vocab_object(parse_json_file(vocab_json), vocab_json.string());

  // OpenAI's encoder.py drops the first line ("#version: 0.2") and splits the rest on lines;
  // HF skips a first line starting with "#version". Both ignore the empty last line.
  const std::string text = read_file(merges_txt);
  std::size_t lineno = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (lineno == 1 && line.substr(0, 8) == "#version")) continue;
    spec.merges.push_back(split_merge(line, merges_txt.string(), lineno));
  }
  QEVAL_CHECK(!spec.merges.empty(), "{}: no merges found (expected lines 'a b')", merges_txt.string());
  return std::make_unique<Gpt2BpeTokenizer>(std::move(spec));
}

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_tokenizer_json(const fs::path& path) {
  const json root = parse_json_file(path);
  const std::string where = path.string();
  QEVAL_CHECK(root.is_object() && root.contains("model"), "{}: expected a tokenizer.json object with a 'model'",
              where);
  Spec spec;
  spec.source = where;
  try {
    const json& model = root.at("model");
    const std::string type = model.value("type", std::string("BPE"));
    QEVAL_CHECK(type == "BPE", "{}: model.type is '{}'; only byte-level BPE tokenizer.json files are supported",
                where, type);
    auto is_unset = [&](const char* key) {
      return !model.contains(key) || model.at(key).is_null() ||
             (model.at(key).is_string() && model.at(key).get<std::string>().empty());
    };
    for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
      QEVAL_CHECK(is_unset(key), "{}: model.{} is {}; byte-level BPE without it is supported", where, key,
                  model.at(key).dump());
    }
    QEVAL_CHECK(!model.value("byte_fallback", false), "{}: model.byte_fallback is true; not a byte-level BPE",
                where);
    spec.ignore_merges = model.value("ignore_merges", false);
    // Without an unknown token, Hugging Face's BPE skips a character the vocabulary lacks: a
    // vocabulary without some of the 256 byte symbols (SmolLM2's lacks 21) drops those bytes, as
    // the GGUF reader does (llama.cpp). With one, the byte would become it: refused below.
    spec.drop_missing_bytes = is_unset("unk_token");
    spec.vocab = read_vocab_object(model.at("vocab"), where + " model.vocab");
    const json& merges = model.at("merges");
    QEVAL_CHECK(merges.is_array(), "{}: model.merges is {}, expected an array", where, merges.type_name());
    spec.merges.reserve(merges.size());
    for (std::size_t i = 0; i < merges.size(); ++i) {
      const json& m = merges[i];
      if (m.is_string()) {  // "a b" (tokenizers < 0.20)
        spec.merges.push_back(split_merge(m.get<std::string>(), where + " model.merges", i + 1));
      } else {  // ["a", "b"] (tokenizers >= 0.20)
        QEVAL_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                    "{}: model.merges[{}] is {}, expected \"a b\" or [\"a\", \"b\"]", where, i, m.dump());
        spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      }
    }

    const json normalizer = root.value("normalizer", json());
    QEVAL_CHECK(normalizer.is_null(), "{}: normalizer {} is not supported (GPT-2 byte-level BPE has none)", where,
                normalizer.dump());
    const json pre = root.value("pre_tokenizer", json());
    QEVAL_CHECK(pre.is_object() && pre.value("type", std::string()) == "ByteLevel",
                "{}: pre_tokenizer is {}, expected ByteLevel (GPT-2 regex)", where, pre.dump());
    QEVAL_CHECK(pre.value("use_regex", true), "{}: ByteLevel pre_tokenizer with use_regex false is not supported",
                where);
    spec.add_prefix_space = pre.value("add_prefix_space", false);
    const json decoder = root.value("decoder", json());
    QEVAL_CHECK(decoder.is_null() || decoder.value("type", std::string()) == "ByteLevel",
                "{}: decoder is {}, expected ByteLevel", where, decoder.dump());

    for (const json& added : root.value("added_tokens", json::array())) {
      const auto id = json_integer(added.at("id"), fmt::format("{}: the id of added token {}", where, added.dump()));
      QEVAL_CHECK(id >= 0 && id <= INT32_MAX, "{}: added token {} has id {}", where, added.dump(), id);
      spec.added.emplace_back(added.at("content").get<std::string>(), static_cast<std::int32_t>(id));
    }
  } catch (const json::exception& e) {
    fail("{}: unexpected tokenizer.json layout: {}", where, e.what());
  }
  return std::make_unique<Gpt2BpeTokenizer>(std::move(spec));
}

}  // namespace qeval
