#include "loaders/tokenizers/gguf_tokenizer.h"

#include <array>

#include "common/error.h"
#include "loaders/checkpoints/gguf.h"
#include "loaders/tokenizers/gguf_vocab.h"
#include "loaders/tokenizers/gpt2_bpe.h"
#include "loaders/tokenizers/spm_tokenizer.h"

namespace qeval {

namespace {

// tokenizer.ggml.pre names and what llama.cpp's llama-vocab.cpp sets for them.
struct PreTokenizerName {
  const char* name;
  BpePretokenizer pretokenizer;
  bool ignore_merges;
  bool add_bos;  // default of tokenizer.ggml.add_bos_token
};

constexpr std::array<PreTokenizerName, 8> kPreTokenizers{{
    {"default", BpePretokenizer::kGpt2, false, false},
    {"gpt-2", BpePretokenizer::kGpt2, false, false},
    {"gpt2", BpePretokenizer::kGpt2, false, false},
    {"smollm", BpePretokenizer::kSmollm, false, false},
    {"llama-bpe", BpePretokenizer::kLlama3, true, true},
    {"llama3", BpePretokenizer::kLlama3, true, true},
    {"llama-v3", BpePretokenizer::kLlama3, true, true},
    {"qwen2", BpePretokenizer::kQwen2, false, false},
}};

const PreTokenizerName& find_pretokenizer(const std::string& pre, const std::string& source) {
  const std::string name = pre.empty() ? "default" : pre;
  for (const auto& p : kPreTokenizers)
    if (name == p.name) return p;
  std::string known;
  for (const auto& p : kPreTokenizers) known += (known.empty() ? "" : ", ") + std::string(p.name);
  fail("{}: tokenizer.ggml.pre is '{}', a pre-tokenizer qeval does not know; known: {}", source, name.substr(0, 60),
       known);
}

// Byte-level BPE from GGUF: Gpt2BpeTokenizer (with the named pre-tokenizer) inside, plus the
// user-defined tokens and the special ids the metadata gives.
class GgufBpeTokenizer final : public Tokenizer {
 public:
  explicit GgufBpeTokenizer(GgufVocab vocab) : user_defined_(vocab) {
    const PreTokenizerName& pre = find_pretokenizer(vocab.pre, vocab.source);
    bos_ = vocab.bos;
    eos_ = vocab.eos;
    add_bos_ = vocab.add_bos.value_or(pre.add_bos);
    add_bos_key_ = vocab.add_bos.value_or(false);
    QEVAL_CHECK(!add_bos_ || bos_.has_value(),
                "{}: tokenizer.ggml.add_bos_token is true, but there is no tokenizer.ggml.bos_token_id", vocab.source);
    Gpt2BpeTokenizer::Spec spec;
    spec.source = vocab.source + " (tokenizer.ggml.tokens, tokenizer.ggml.merges)";
    spec.vocab.reserve(vocab.tokens.size());
    for (std::size_t i = 0; i < vocab.tokens.size(); ++i) {
      spec.vocab.emplace_back(std::move(vocab.tokens[i]), static_cast<std::int32_t>(i));
    }
    spec.merges = std::move(vocab.merges);
    spec.ignore_merges = pre.ignore_merges;
    spec.pretokenizer = pre.pretokenizer;
    spec.drop_missing_bytes = true;  // llama.cpp and Hugging Face both drop such bytes
    bpe_ = std::make_unique<Gpt2BpeTokenizer>(std::move(spec));
    separator_ = bpe_->token_id("<|endoftext|>");
    if (!separator_) separator_ = eos_;
  }

  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::vector<std::int32_t> ids;
    for (const TextFragment& f : user_defined_.split(text)) {
      if (f.token >= 0) {
        ids.push_back(f.token);
        continue;
      }
      const std::vector<std::int32_t> part = bpe_->encode(f.text);
      ids.insert(ids.end(), part.begin(), part.end());
    }
    return ids;
  }
  // Exact cuts only without user-defined tokens (a cut could split one; they are rare in GGUF BPE
  // vocabularies, and such a tokenizer encodes each document whole).
  std::size_t continuation_cut(std::string_view text, std::size_t limit) const override {
    return user_defined_.empty() ? bpe_->continuation_cut(text, limit) : 0;
  }
  std::vector<std::int32_t> encode_continuation(std::string_view text) const override {
    return user_defined_.empty() ? bpe_->encode_continuation(text) : encode(text);
  }
  std::string decode(const std::vector<std::int32_t>& ids) const override { return bpe_->decode(ids); }
  std::int64_t vocab_size() const override { return bpe_->vocab_size(); }
  std::optional<std::int32_t> bos_id() const override { return bos_; }
  std::optional<std::int32_t> eos_id() const override { return eos_; }
  std::optional<std::int32_t> document_separator() const override { return separator_; }
  bool adds_bos() const override { return add_bos_; }
  bool bos_per_window_by_default() const override { return add_bos_key_; }
  std::string kind() const override { return "gpt2-bpe"; }

 private:
  UserDefinedTokens user_defined_;
  std::unique_ptr<Gpt2BpeTokenizer> bpe_;
  std::optional<std::int32_t> bos_, eos_, separator_;
  bool add_bos_ = false;
  bool add_bos_key_ = false;  // tokenizer.ggml.add_bos_token present and true
};

}  // namespace

std::unique_ptr<Tokenizer> gguf_tokenizer_from_metadata(const nlohmann::json& metadata, const std::string& source) {
  GgufVocab vocab = read_gguf_vocab(metadata, source);
  if (vocab.model == "gpt2") return std::make_unique<GgufBpeTokenizer>(std::move(vocab));
  return std::make_unique<GgufSpmTokenizer>(std::move(vocab));
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::filesystem::path& path) {
  const GgufFile file(path);
  return gguf_tokenizer_from_metadata(file.metadata(), path.string());
}

bool gguf_has_tokenizer(const std::filesystem::path& path) {
  try {
    return GgufFile(path).has("tokenizer.ggml.model");
  } catch (const Error&) {
    return false;
  }
}

}  // namespace qeval
