// Pieces the protocol implementations share (not a public interface beyond loaders/).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "loaders/text/documents.h"
#include "loaders/protocols/protocol.h"
#include "loaders/tokenizers/tokenizer.h"

namespace qeval {

// A stream of token ids in stream order.
class TokenSupply {
 public:
  virtual ~TokenSupply() = default;
  // Appends the next tokens to `out` (possibly none, e.g. an empty document without a
  // separator); false only at the end of the data.
  virtual bool append(std::vector<std::int32_t>& out) = 0;
  virtual std::int64_t documents_read() const = 0;
  virtual std::int64_t tokens_read() const = 0;
  virtual nlohmann::json facts() const = 0;  // where the tokens came from
  virtual std::string format() const = 0;    // WindowSource::data_format()
};

// Documents tokenised one at a time; `separator` (when set) opens each document.
std::unique_ptr<TokenSupply> document_token_supply(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer,
                                                   std::optional<std::int32_t> separator);
// A pre-tokenised file (loaders/text/token_file.cpp).
std::unique_ptr<TokenSupply> token_file_supply(const std::filesystem::path& path, TokenDtype dtype,
                                               std::int64_t vocab_size);

// The separator `s` resolves to for `protocol` (auto: `fallback`); errors name the protocol.
std::optional<std::int32_t> resolve_separator(Separator s, const Tokenizer* tokenizer, std::optional<std::int32_t> fallback,
                                              const std::string& protocol);
// Whether BOS is added (auto: the tokenizer is not GPT-2 BPE and has a BOS, as HF's Llama
// tokenizer and llama.cpp's SentencePiece vocabularies do); the id, or nullopt when not.
std::optional<std::int32_t> resolve_bos(BosMode b, const Tokenizer* tokenizer, const std::string& protocol);
nlohmann::json id_json(std::optional<std::int32_t> id);

std::unique_ptr<WindowSource> make_stride_source(std::unique_ptr<TokenSupply> supply, ProtocolSpec spec,
                                                 nlohmann::json facts);
std::unique_ptr<WindowSource> make_llamacpp_source(std::unique_ptr<TokenSupply> supply, std::optional<std::int32_t> separator,
                                                   std::optional<std::int32_t> bos, ProtocolSpec spec);
std::unique_ptr<WindowSource> make_gptq_c4_source(std::unique_ptr<DocumentReader> documents, const Tokenizer& tokenizer,
                                                  ProtocolSpec spec, const std::string& source_name);

}  // namespace qeval
