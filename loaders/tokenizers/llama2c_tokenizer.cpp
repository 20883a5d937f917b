#include "loaders/tokenizers/llama2c_tokenizer.h"

#include <cmath>
#include <cstring>
#include <queue>

#include "common/error.h"
#include "common/files.h"

namespace qeval {

namespace {

// run.c starts its search with best_score = -1e10f and takes only strictly better scores, so a
// merge whose score is <= -1e10 (or NaN) is never made.
constexpr float kNoScore = -1e10f;

template <typename T>
T read_le(const std::string& bytes, std::size_t pos) {
  T value;
  std::memcpy(&value, bytes.data() + pos, sizeof(T));  // x86/ARM little-endian, as the file
  return value;
}

std::optional<std::uint8_t> byte_piece(const std::string& piece) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return std::nullopt;
  const int hi = hex(piece[3]);
  const int lo = hex(piece[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<std::uint8_t>(hi * 16 + lo);
}

}  // namespace

std::unique_ptr<Llama2cTokenizer> Llama2cTokenizer::load(const std::filesystem::path& path) {
  auto tok = std::unique_ptr<Llama2cTokenizer>(new Llama2cTokenizer());
  tok->source_ = path.string();
  const std::string& where = tok->source_;
  const std::string bytes = read_file(path);
  QEVAL_CHECK(bytes.size() >= 4, "{}: llama2.c tokenizer needs a 4-byte max_token_length header, file has {} bytes",
              where, bytes.size());
  tok->max_token_length_ = read_le<std::int32_t>(bytes, 0);
  QEVAL_CHECK(tok->max_token_length_ > 0 && static_cast<std::uint64_t>(tok->max_token_length_) <= bytes.size(),
              "{}: max_token_length is {}, expected 1..{} (the file size)", where, tok->max_token_length_,
              bytes.size());
  std::size_t pos = 4;
  while (pos < bytes.size()) {
    const std::size_t id = tok->pieces_.size();
    QEVAL_CHECK(bytes.size() - pos >= 8,
                "{}: truncated at token {} (offset {}): expected 8 bytes of score and length, found {}", where, id,
                pos, bytes.size() - pos);
    const float score = read_le<float>(bytes, pos);
    const std::int32_t len = read_le<std::int32_t>(bytes, pos + 4);
    pos += 8;
    QEVAL_CHECK(len >= 0 && len <= tok->max_token_length_,
                "{}: token {} (offset {}) has length {}, expected 0..{} (max_token_length)", where, id, pos - 4, len,
                tok->max_token_length_);
    QEVAL_CHECK(static_cast<std::size_t>(len) <= bytes.size() - pos,
                "{}: truncated at token {}: expected {} bytes of text at offset {}, file ends after {}", where, id,
                len, pos, bytes.size() - pos);
    tok->pieces_.emplace_back(bytes.data() + pos, static_cast<std::size_t>(len));
    tok->scores_.push_back(score);
    pos += static_cast<std::size_t>(len);
  }
  QEVAL_CHECK(tok->pieces_.size() >= 3, "{}: {} tokens, expected at least <unk>, BOS and EOS", where,
              tok->pieces_.size());
  QEVAL_CHECK(tok->pieces_.size() <= static_cast<std::size_t>(INT32_MAX), "{}: too many tokens", where);
  tok->ids_.reserve(tok->pieces_.size());
  for (std::size_t id = 0; id < tok->pieces_.size(); ++id) {
    tok->ids_.emplace(tok->pieces_[id], static_cast<std::int32_t>(id));  // keeps the lowest id
  }
  if (auto space = tok->lookup(" ")) tok->space_id_ = *space;
  tok->cuttable_ = true;
  for (const std::string& piece : tok->pieces_)
    for (std::size_t i = 1; i < piece.size(); ++i)
      if (piece[i] == ' ' && piece[i - 1] != ' ') tok->cuttable_ = false;
  return tok;
}

std::optional<std::int32_t> Llama2cTokenizer::lookup(std::string_view s) const {
  const auto it = ids_.find(std::string(s));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::int32_t> Llama2cTokenizer::encode(std::string_view text) const { return encode_text(text, true); }

std::vector<std::int32_t> Llama2cTokenizer::encode_continuation(std::string_view text) const {
  return encode_text(text, false);
}

std::size_t Llama2cTokenizer::continuation_cut(std::string_view text, std::size_t limit) const {
  return cuttable_ ? cut_before_space(text, limit) : 0;
}

std::vector<std::int32_t> Llama2cTokenizer::encode_text(std::string_view text, bool dummy_prefix) const {
  std::vector<std::int32_t> tokens;
  if (text.empty()) return tokens;
  tokens.reserve(text.size() + 1);
  if (dummy_prefix) {
    QEVAL_CHECK(space_id_ >= 0, "{}: cannot encode: the vocabulary has no \" \" token for the dummy prefix", source_);
    tokens.push_back(space_id_);
  }

  // UTF-8 characters exactly as run.c groups them: a non-continuation byte starts a group,
  // continuation bytes join it while it has fewer than 4 bytes.
  for (std::size_t i = 0; i < text.size();) {
    std::size_t len = 1;
    while (i + len < text.size() && len < 4 && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80) ++len;
    const std::string_view ch = text.substr(i, len);
    if (auto id = lookup(ch)) {
      tokens.push_back(*id);
    } else {
      for (char b : ch) {
        const int id = static_cast<unsigned char>(b) + 3;
        QEVAL_CHECK(id < vocab_size(), "{}: byte fallback needs id {} for byte 0x{:02X}, vocabulary size is {}",
                    source_, id, static_cast<unsigned char>(b), vocab_size());
        tokens.push_back(id);
      }
    }
    i += len;
  }

  // Merges: run.c rescans all pairs each round; a heap over a linked list makes the same choices
  // (highest score, then leftmost) without the quadratic cost on long paragraphs.
  const auto n = static_cast<std::int32_t>(tokens.size());
  std::vector<std::int32_t> next(n), prev(n);
  for (std::int32_t i = 0; i < n; ++i) next[i] = i + 1, prev[i] = i - 1;
  struct Candidate {
    float score;
    std::int32_t pos;
    std::int32_t left, right, merged;
    bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : pos > o.pos; }
  };
  std::priority_queue<Candidate> heap;
  std::string scratch;
  auto consider = [&](std::int32_t l, std::int32_t r) {
    if (l < 0 || r >= n) return;
    scratch = pieces_[tokens[l]];
    scratch += pieces_[tokens[r]];
    const auto it = ids_.find(scratch);
    if (it == ids_.end() || !(scores_[it->second] > kNoScore)) return;
    heap.push({scores_[it->second], l, tokens[l], tokens[r], it->second});
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const std::int32_t r = next[c.pos];
    if (tokens[c.pos] != c.left || r >= n || tokens[r] != c.right) continue;  // stale
    tokens[c.pos] = c.merged;
    tokens[r] = -1;
    next[c.pos] = next[r];
    if (next[r] < n) prev[next[r]] = c.pos;
    consider(prev[c.pos], c.pos);
    consider(c.pos, next[c.pos]);
  }
  std::vector<std::int32_t> out;
  out.reserve(tokens.size());
  for (std::int32_t i = 0; i < n; i = next[i]) out.push_back(tokens[i]);
  return out;
}

std::string Llama2cTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    QEVAL_CHECK(id >= 0 && id < vocab_size(), "{}: cannot decode token {} at position {}: vocabulary size is {}",
                source_, id, i, vocab_size());
    if (id == 1 || id == 2) continue;
    const std::string& piece = pieces_[id];
    if (auto byte = byte_piece(piece)) {
      text.push_back(static_cast<char>(*byte));
    } else if (i > 0 && ids[i - 1] == 1 && !piece.empty() && piece[0] == ' ') {
      text.append(piece, 1, std::string::npos);
    } else {
      text += piece;
    }
  }
  return text;
}

}  // namespace qeval
