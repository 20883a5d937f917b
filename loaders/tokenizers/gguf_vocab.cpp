#include "loaders/tokenizers/gguf_vocab.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "common/error.h"

namespace qeval {

namespace {

// Vocabularies beyond this are refused before anything is sized by them (real ones: < 300k).
constexpr std::size_t kMaxTokens = std::size_t{1} << 24;
constexpr std::size_t kMaxMerges = std::size_t{1} << 24;

// Token text in messages: at most 60 bytes.
std::string shown(std::string_view s) { return s.size() <= 60 ? std::string(s) : std::string(s.substr(0, 60)) + "..."; }

class Reader {
 public:
  Reader(const nlohmann::json& metadata, const std::string& source) : md_(metadata), source_(source) {
    QEVAL_CHECK(md_.is_object(), "{}: GGUF metadata is not a key/value object", source_);
  }

  const nlohmann::json* find(const char* key) const {
    const auto it = md_.find(key);
    return it == md_.end() ? nullptr : &*it;
  }

  std::string string(const char* key, bool required) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) {
      QEVAL_CHECK(!required, "{}: no tokenizer in this GGUF file: key {} is missing", source_, key);
      return {};
    }
    QEVAL_CHECK(v->is_string(), "{}: {} must be a string, found {}", source_, key, v->type_name());
    return v->get<std::string>();
  }

  std::optional<bool> boolean(const char* key) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return std::nullopt;
    QEVAL_CHECK(v->is_boolean(), "{}: {} must be a bool, found {}", source_, key, v->type_name());
    return v->get<bool>();
  }

  // An array of `expected` elements (any count up to `max` when expected is 0), or nullptr.
  const nlohmann::json* array(const char* key, std::size_t expected, std::size_t max) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return nullptr;
    QEVAL_CHECK(v->is_array(), "{}: {} must be an array, found {}", source_, key, v->type_name());
    if (expected != 0) {
      QEVAL_CHECK(v->size() == expected, "{}: {} has {} entries, expected one per token ({})", source_, key, v->size(),
                  expected);
    }
    QEVAL_CHECK(v->size() <= max, "{}: {} has {} entries, more than the {} accepted", source_, key, v->size(), max);
    return v;
  }

  // A token id: nullopt when absent or unset (-1 / 0xFFFFFFFF), else checked against n_tokens.
  std::optional<std::int32_t> token_id(const char* key, std::size_t n_tokens) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return std::nullopt;
    QEVAL_CHECK(v->is_number_integer(), "{}: {} must be an integer token id, found {}", source_, key, v->type_name());
    if (v->is_number_unsigned()) {
      const auto u = v->get<std::uint64_t>();
      if (u == 0xFFFFFFFFu || u == ~std::uint64_t{0}) return std::nullopt;
      QEVAL_CHECK(u < n_tokens, "{}: {} is {}, outside the vocabulary of {} tokens", source_, key, u, n_tokens);
      return static_cast<std::int32_t>(u);
    }
    const auto s = v->get<std::int64_t>();
    if (s == -1) return std::nullopt;
    QEVAL_CHECK(s >= 0 && static_cast<std::uint64_t>(s) < n_tokens, "{}: {} is {}, outside the vocabulary of {} tokens",
                source_, key, s, n_tokens);
    return static_cast<std::int32_t>(s);
  }

  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& md_;
  const std::string& source_;
};

}  // namespace

GgufVocab read_gguf_vocab(const nlohmann::json& metadata, const std::string& source) {
  const Reader r(metadata, source);
  GgufVocab v;
  v.source = source;
  v.model = r.string("tokenizer.ggml.model", true);
  QEVAL_CHECK(v.model == "llama" || v.model == "gpt2",
              "{}: tokenizer.ggml.model is '{}'; qeval reads 'llama' (SentencePiece-style) and 'gpt2' (byte-level "
              "BPE) vocabularies",
              source, shown(v.model));
  v.pre = r.string("tokenizer.ggml.pre", false);

  const nlohmann::json* tokens = r.array("tokenizer.ggml.tokens", 0, kMaxTokens);
  QEVAL_CHECK(tokens != nullptr, "{}: key tokenizer.ggml.tokens is missing", source);
  QEVAL_CHECK(!tokens->empty(), "{}: tokenizer.ggml.tokens is empty", source);
  const std::size_t n = tokens->size();
  v.tokens.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& t = (*tokens)[i];
    QEVAL_CHECK(t.is_string(), "{}: tokenizer.ggml.tokens[{}] must be a string, found {}", source, i, t.type_name());
    v.tokens.push_back(t.get<std::string>());
    if (v.tokens.back().empty()) v.tokens.back() = "[EMPTY_" + std::to_string(i) + "]";
  }
  std::unordered_map<std::string_view, std::int32_t> ids;
  ids.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto [it, inserted] = ids.emplace(v.tokens[i], static_cast<std::int32_t>(i));
    QEVAL_CHECK(inserted, "{}: tokenizer.ggml.tokens has '{}' twice, at {} and {}", source, shown(v.tokens[i]),
                it->second, i);
  }

  if (const nlohmann::json* scores = r.array("tokenizer.ggml.scores", n, kMaxTokens)) {
    v.scores.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto& s = (*scores)[i];
      QEVAL_CHECK(s.is_number(), "{}: tokenizer.ggml.scores[{}] must be a number, found {}", source, i, s.type_name());
      const auto f = s.get<double>();
      QEVAL_CHECK(!std::isnan(f), "{}: tokenizer.ggml.scores[{}] is NaN", source, i);
      v.scores.push_back(static_cast<float>(f));
    }
  }

  v.types.assign(n, GgufTokenType::kNormal);
  if (const nlohmann::json* types = r.array("tokenizer.ggml.token_type", n, kMaxTokens)) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto& t = (*types)[i];
      QEVAL_CHECK(t.is_number_integer(), "{}: tokenizer.ggml.token_type[{}] must be an integer, found {}", source, i,
                  t.type_name());
      const auto value = t.get<std::int64_t>();
      v.types[i] = value >= 0 && value <= 6 ? static_cast<GgufTokenType>(value) : GgufTokenType::kUndefined;
    }
  }

  const nlohmann::json* merges = r.array("tokenizer.ggml.merges", 0, kMaxMerges);
  QEVAL_CHECK(merges != nullptr || v.model != "gpt2",
              "{}: key tokenizer.ggml.merges is missing (a 'gpt2' vocabulary needs its merges)", source);
  if (merges != nullptr) {
    v.merges.reserve(merges->size());
    for (std::size_t i = 0; i < merges->size(); ++i) {
      const auto& m = (*merges)[i];
      QEVAL_CHECK(m.is_string(), "{}: tokenizer.ggml.merges[{}] must be a string, found {}", source, i, m.type_name());
      const auto& text = m.get_ref<const std::string&>();
      const std::size_t space = text.size() < 2 ? std::string::npos : text.find(' ', 1);
      QEVAL_CHECK(space != std::string::npos && space + 1 < text.size(),
                  "{}: tokenizer.ggml.merges[{}] is '{}', expected two symbols separated by a space", source, i,
                  shown(text));
      std::string left = text.substr(0, space), right = text.substr(space + 1);
      for (const std::string* symbol : {&left, &right}) {
        QEVAL_CHECK(ids.count(*symbol) != 0,
                    "{}: tokenizer.ggml.merges[{}] ('{}') uses '{}', which is not in tokenizer.ggml.tokens", source, i,
                    shown(text), shown(*symbol));
      }
      QEVAL_CHECK(ids.count(left + right) != 0,
                  "{}: tokenizer.ggml.merges[{}] ('{}') makes '{}', which is not in tokenizer.ggml.tokens", source, i,
                  shown(text), shown(left + right));
      v.merges.emplace_back(std::move(left), std::move(right));
    }
  }

  v.bos = r.token_id("tokenizer.ggml.bos_token_id", n);
  v.eos = r.token_id("tokenizer.ggml.eos_token_id", n);
  v.unk = r.token_id("tokenizer.ggml.unknown_token_id", n);
  v.add_bos = r.boolean("tokenizer.ggml.add_bos_token");
  v.add_space_prefix = r.boolean("tokenizer.ggml.add_space_prefix");
  return v;
}

UserDefinedTokens::UserDefinedTokens(const GgufVocab& vocab) {
  for (std::size_t i = 0; i < vocab.tokens.size(); ++i) {
    if (vocab.types[i] == GgufTokenType::kUserDefined)
      tokens_.emplace_back(vocab.tokens[i], static_cast<std::int32_t>(i));
  }
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

std::vector<TextFragment> UserDefinedTokens::split(std::string_view text) const {
  std::vector<TextFragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({text, -1});
  std::vector<TextFragment> next;
  for (const auto& [token, id] : tokens_) {
    next.clear();
    for (const TextFragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      for (std::size_t at = rest.find(token); at != std::string_view::npos; at = rest.find(token)) {
        if (at > 0) next.push_back({rest.substr(0, at), -1});
        next.push_back({rest.substr(at, token.size()), id});
        rest.remove_prefix(at + token.size());
      }
      if (!rest.empty()) next.push_back({rest, -1});
    }
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace qeval
