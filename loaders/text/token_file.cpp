// Pre-tokenised .bin token files: dtype detection and a streaming, vocabulary-checked reader.
#include "loaders/text/token_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace qeval {

std::string to_string(TokenDtype d) {
  return d == TokenDtype::auto_ ? "auto" : d == TokenDtype::uint16 ? "uint16" : "uint32";
}

TokenDtype parse_token_dtype(const std::string& s) {
  if (s == "auto") return TokenDtype::auto_;
  if (s == "uint16") return TokenDtype::uint16;
  if (s == "uint32") return TokenDtype::uint32;
  fail("unknown token dtype '{}': expected one of auto, uint16, uint32", s);
}

namespace {
constexpr std::size_t kBlockTokens = std::size_t{1} << 20;
}  // namespace

TokenFileInfo probe_token_file(const std::filesystem::path& path, TokenDtype dtype, std::int64_t vocab_size) {
  std::error_code ec;
  const std::uint64_t bytes = std::filesystem::file_size(path, ec);
  QEVAL_CHECK(!ec, "token file {}: cannot read its size: {}", path.string(), ec.message());
  QEVAL_CHECK(bytes > 0, "token file {} is empty", path.string());
  TokenFileInfo info;
  info.bytes = bytes;
  if (dtype != TokenDtype::auto_) {
    info.dtype = dtype;
    info.dtype_reason = "option";
  } else if (vocab_size > 65536) {
    info.dtype = TokenDtype::uint32;
    info.dtype_reason = fmt::format("vocabulary {} > 65,536", vocab_size);
  } else {
    info.dtype = TokenDtype::uint16;
    info.dtype_reason = "default (nanoGPT)";
    if (bytes % 4 == 0) {
      std::ifstream in(path, std::ios::binary);
      QEVAL_CHECK(in.good(), "cannot open token file {}", path.string());
      std::vector<std::uint16_t> halves(static_cast<std::size_t>(std::min<std::uint64_t>(bytes / 2, 2 * kBlockTokens)));
      in.read(reinterpret_cast<char*>(halves.data()), static_cast<std::streamsize>(halves.size() * 2));
      QEVAL_CHECK(in.good(), "token file {}: read failed", path.string());
      bool upper_zero = true, lower_nonzero = false;
      for (std::size_t i = 0; i + 1 < halves.size(); i += 2) {
        upper_zero = upper_zero && halves[i + 1] == 0;
        lower_nonzero = lower_nonzero || halves[i] != 0;
      }
      if (upper_zero && lower_nonzero) {
        info.dtype = TokenDtype::uint32;
        info.dtype_reason = "every upper 16-bit half is zero: uint32";
      }
    }
  }
  const std::uint64_t width = info.dtype == TokenDtype::uint16 ? 2 : 4;
  QEVAL_CHECK(bytes % width == 0, "token file {}: {} bytes is not a whole number of {} tokens ({} bytes each)",
              path.string(), bytes, to_string(info.dtype), width);
  info.tokens = static_cast<std::int64_t>(bytes / width);
  return info;
}

TokenFileReader::TokenFileReader(std::filesystem::path path, TokenDtype dtype, std::int64_t vocab_size)
    : path_(std::move(path)), info_(probe_token_file(path_, dtype, vocab_size)), vocab_(vocab_size), in_(path_, std::ios::binary) {
  QEVAL_CHECK(in_.good(), "cannot open token file {}", path_.string());
  QEVAL_CHECK(vocab_ > 0, "token file {}: the vocabulary size must be known to check ids", path_.string());
}

bool TokenFileReader::read_block(std::vector<std::int32_t>& out) {
  if (read_ >= info_.tokens) return false;
  const auto n = static_cast<std::size_t>(std::min<std::int64_t>(info_.tokens - read_, kBlockTokens));
  const bool wide = info_.dtype == TokenDtype::uint32;
  buffer_.resize(n * (wide ? 4 : 2));
  in_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  QEVAL_CHECK(static_cast<std::size_t>(in_.gcount()) == buffer_.size(), "token file {}: read failed at token {}",
              path_.string(), read_);
  out.reserve(out.size() + n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t id;
    if (wide) {
      std::uint32_t v;
      std::memcpy(&v, buffer_.data() + 4 * i, 4);
      id = v;
    } else {
      std::uint16_t v;
      std::memcpy(&v, buffer_.data() + 2 * i, 2);
      id = v;
    }
    if (static_cast<std::int64_t>(id) >= vocab_) {
      const std::int64_t at = read_ + static_cast<std::int64_t>(i);
      fail("token file {}: token {} (byte offset {}) is id {}, not below the model's vocabulary of {} (read as {}, {}); "
           "wrong dtype or a file for another tokenizer?",
           path_.string(), at, at * (wide ? 4 : 2), id, vocab_, to_string(info_.dtype), info_.dtype_reason);
    }
    out.push_back(static_cast<std::int32_t>(id));
  }
  read_ += static_cast<std::int64_t>(n);
  return true;
}

}  // namespace qeval
