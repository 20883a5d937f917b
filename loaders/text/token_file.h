// Pre-tokenised token files as nanoGPT writes them (`np.array(ids, dtype=np.uint16).tofile(
// "val.bin")`): a flat little-endian array of token ids, no header. Read as a data source whose
// windows come straight from the token stream (no tokenizer, no separators added; the protocols
// wrap TokenFileReader in loaders/protocols/token_file_supply.cpp).
//
// dtype: uint16 or uint32 by option; `auto` decides from what can be known:
//   - vocabulary > 65,536 → uint32 (uint16 cannot hold the ids);
//   - else, if the size is a multiple of 4 and, over the first 2^20 uint32 words, every upper
//     16-bit half is zero while some lower half is not → uint32 (a uint16 file would need a
//     zero at every odd position);
//   - else uint16 (nanoGPT's choice for GPT-2's 50,257 tokens).
// Every id is checked against the vocabulary; an id >= it throws naming the file, the token
// offset and the byte offset. Files are streamed in 1 Mi-token blocks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace qeval {

enum class TokenDtype { auto_, uint16, uint32 };
std::string to_string(TokenDtype d);
TokenDtype parse_token_dtype(const std::string& s);  // throws with the valid names

struct TokenFileInfo {
  TokenDtype dtype = TokenDtype::uint16;  // resolved
  std::int64_t tokens = 0;
  std::uint64_t bytes = 0;
  std::string dtype_reason;               // why auto chose it ("option" when given)
};

// Checks the size against the dtype and resolves `auto`; throws naming the file.
TokenFileInfo probe_token_file(const std::filesystem::path& path, TokenDtype dtype, std::int64_t vocab_size);

// Streams a token file's ids in blocks, each checked against the vocabulary.
class TokenFileReader {
 public:
  TokenFileReader(std::filesystem::path path, TokenDtype dtype, std::int64_t vocab_size);
  // Appends the next block (up to 1 Mi tokens) to `out`; false at the end of the file.
  bool read_block(std::vector<std::int32_t>& out);
  const TokenFileInfo& info() const { return info_; }
  std::int64_t tokens_read() const { return read_; }
  std::int64_t vocab_size() const { return vocab_; }

 private:
  std::filesystem::path path_;
  TokenFileInfo info_;
  std::int64_t vocab_;
  std::ifstream in_;
  std::vector<char> buffer_;
  std::int64_t read_ = 0;
};

}  // namespace qeval
