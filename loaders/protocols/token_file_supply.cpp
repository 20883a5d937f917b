// The protocols' token supply over a pre-tokenised .bin file (loaders/text/token_file.h).
#include <memory>

#include "loaders/protocols/protocol_internal.h"
#include "loaders/text/token_file.h"

namespace qeval {

namespace {

class TokenFileSupply : public TokenSupply {
 public:
  TokenFileSupply(const std::filesystem::path& path, TokenDtype dtype, std::int64_t vocab) : reader_(path, dtype, vocab) {}

  bool append(std::vector<std::int32_t>& out) override { return reader_.read_block(out); }
  std::int64_t documents_read() const override { return 0; }
  std::string format() const override { return "tokens-" + to_string(reader_.info().dtype); }
  std::int64_t tokens_read() const override { return reader_.tokens_read(); }
  nlohmann::json facts() const override {
    const TokenFileInfo& info = reader_.info();
    return {{"source", "token file"},      {"dtype", to_string(info.dtype)}, {"dtype_reason", info.dtype_reason},
            {"file_tokens", info.tokens}, {"vocab_size_checked", reader_.vocab_size()}};
  }

 private:
  TokenFileReader reader_;
};

}  // namespace

std::unique_ptr<TokenSupply> token_file_supply(const std::filesystem::path& path, TokenDtype dtype,
                                               std::int64_t vocab_size) {
  return std::make_unique<TokenFileSupply>(path, dtype, vocab_size);
}

}  // namespace qeval
