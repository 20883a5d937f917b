#include "loaders/tokenizers/spm_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>

#include "common/error.h"

namespace qeval {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// llama.cpp's unicode_len_utf8: the length a lead byte announces (1 for continuation bytes).
std::size_t utf8_length(unsigned char lead) {
  static constexpr std::array<std::uint8_t, 16> kByHighNibble{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighNibble[lead >> 4];
}

// The byte of a "<0xNN>" token, -1 for any other text.
int byte_of_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  auto hex = [](char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// A default special id (llama.cpp's for "llama" vocabularies) when the key is absent and it fits.
std::optional<std::int32_t> or_default(std::optional<std::int32_t> id, std::int32_t fallback, std::size_t n) {
  if (id) return id;
  return static_cast<std::size_t>(fallback) < n ? std::optional<std::int32_t>(fallback) : std::nullopt;
}

}  // namespace

GgufSpmTokenizer::GgufSpmTokenizer(GgufVocab vocab)
    : user_defined_(vocab),
      source_(std::move(vocab.source)),
      tokens_(std::move(vocab.tokens)),
      scores_(std::move(vocab.scores)),
      types_(std::move(vocab.types)),
      bos_(or_default(vocab.bos, 1, tokens_.size())),
      eos_(or_default(vocab.eos, 2, tokens_.size())),
      unk_(or_default(vocab.unk, 0, tokens_.size())),
      add_bos_(vocab.add_bos.value_or(true)),
      add_bos_key_(vocab.add_bos.value_or(false)),
      add_space_prefix_(vocab.add_space_prefix.value_or(true)) {
  QEVAL_CHECK(scores_.size() == tokens_.size(),
              "{}: tokenizer.ggml.scores is missing: a 'llama' vocabulary merges by score", source_);
  QEVAL_CHECK(types_.size() == tokens_.size(), "{}: tokenizer.ggml.token_type: {} types for {} tokens", source_,
              types_.size(), tokens_.size());
  QEVAL_CHECK(!add_bos_ || bos_.has_value(),
              "{}: tokenizer.ggml.add_bos_token is true, but there is no tokenizer.ggml.bos_token_id", source_);
  ids_.reserve(tokens_.size());
  for (std::size_t i = 0; i < tokens_.size(); ++i) ids_.emplace(tokens_[i], static_cast<std::int32_t>(i));
  cuttable_ = user_defined_.empty();
  for (const std::string& t : tokens_)
    for (std::size_t at = t.find(kSpaceMark, 1); at != std::string::npos; at = t.find(kSpaceMark, at + 1))
      if (at < kSpaceMark.size() || t.compare(at - kSpaceMark.size(), kSpaceMark.size(), kSpaceMark) != 0) cuttable_ = false;
  for (int b = 0; b < 256; ++b) {
    std::int32_t id = find(fmt::format("<0x{:02X}>", b));
    if (id < 0) id = find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = id;
  }
}

std::int32_t GgufSpmTokenizer::find(std::string_view piece) const {
  const auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

std::vector<std::int32_t> GgufSpmTokenizer::encode(std::string_view text) const { return encode_text(text, true); }

std::vector<std::int32_t> GgufSpmTokenizer::encode_continuation(std::string_view text) const {
  return encode_text(text, false);
}

std::size_t GgufSpmTokenizer::continuation_cut(std::string_view text, std::size_t limit) const {
  return cuttable_ ? cut_before_space(text, limit) : 0;
}

std::vector<std::int32_t> GgufSpmTokenizer::encode_text(std::string_view text, bool space_prefix) const {
  std::vector<std::int32_t> ids;
  bool after_special = space_prefix;  // the text start counts as following a special token
  std::string escaped;
  for (const TextFragment& f : user_defined_.split(text)) {
    if (f.token >= 0) {
      ids.push_back(f.token);
      after_special = true;
      continue;
    }
    escaped.clear();
    if (add_space_prefix_ && after_special) escaped = kSpaceMark;
    for (char ch : f.text) {
      if (ch == ' ') {
        escaped += kSpaceMark;
      } else {
        escaped.push_back(ch);
      }
    }
    encode_fragment(escaped, ids);
    after_special = false;
  }
  return ids;
}

void GgufSpmTokenizer::encode_fragment(std::string_view text, std::vector<std::int32_t>& out) const {
  struct Symbol {
    std::int32_t start;
    std::int32_t n;  // bytes; 0 once merged into its left neighbour
    std::int32_t prev;
    std::int32_t next;  // -1 at the end
  };
  struct Bigram {
    float score;
    std::int32_t left;
    std::int32_t right;
    std::int32_t size;  // bytes of both symbols when queued: stale once either changes
  };
  // Highest score first, then leftmost (llm_bigram_spm::comparator).
  auto lower_priority = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  QEVAL_CHECK(text.size() < (std::size_t{1} << 31), "{}: a text fragment of {} bytes is too long to encode", source_,
              text.size());

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    const auto len =
        static_cast<std::int32_t>(std::min(utf8_length(static_cast<unsigned char>(text[pos])), text.size() - pos));
    const auto index = static_cast<std::int32_t>(symbols.size());
    pos += static_cast<std::size_t>(len);
    symbols.push_back({static_cast<std::int32_t>(pos) - len, len, index - 1, pos == text.size() ? -1 : index + 1});
  }
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower_priority)> queue(lower_priority);
  auto try_add = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    const std::int32_t size = symbols[left].n + symbols[right].n;
    const std::int32_t id =
        find(text.substr(static_cast<std::size_t>(symbols[left].start), static_cast<std::size_t>(size)));
    if (id >= 0) queue.push({scores_[id], left, right, size});
  };
  for (std::size_t i = 1; i < symbols.size(); ++i)
    try_add(static_cast<std::int32_t>(i) - 1, static_cast<std::int32_t>(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }
  for (std::int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece =
        text.substr(static_cast<std::size_t>(symbols[i].start), static_cast<std::size_t>(symbols[i].n));
    if (const std::int32_t id = find(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char ch : piece) {
      const std::int32_t id = byte_ids_[static_cast<unsigned char>(ch)];
      if (id < 0) {
        QEVAL_CHECK(unk_.has_value(),
                    "{}: cannot encode byte 0x{:02X}: the vocabulary has no <0x{:02X}> token and no <unk>", source_,
                    static_cast<unsigned char>(ch), static_cast<unsigned char>(ch));
        out.push_back(*unk_);
        break;
      }
      out.push_back(id);
    }
  }
}

std::string GgufSpmTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string text;
  bool strip_space = add_space_prefix_;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    QEVAL_CHECK(id >= 0 && id < vocab_size(),
                "{}: cannot decode token {} at position {}: not in the vocabulary (size {})", source_, id, i,
                vocab_size());
    const std::string& token = tokens_[id];
    std::string piece;
    switch (types_[id]) {
      case GgufTokenType::kNormal:
        for (std::size_t pos = 0; pos < token.size();) {
          if (token.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
            piece.push_back(' ');
            pos += kSpaceMark.size();
          } else {
            piece.push_back(token[pos++]);
          }
        }
        break;
      case GgufTokenType::kUserDefined:
        piece = token;
        break;
      case GgufTokenType::kByte: {
        const int byte = byte_of_token(token);
        piece = byte >= 0 ? std::string(1, static_cast<char>(byte)) : token;
        break;
      }
      default:  // control, unknown, unused, undefined: nothing, as llama.cpp without `special`
        break;
    }
    if (piece.empty()) continue;
    if (strip_space && piece.front() == ' ') piece.erase(0, 1);
    strip_space = false;
    text += piece;
  }
  return text;
}

}  // namespace qeval
