#include "loaders/tokenizers/gpt2_bpe.h"

#include <algorithm>
#include <iterator>
#include <queue>

#include "common/error.h"
#include "loaders/tokenizers/gpt2_unicode.h"

namespace qeval {

namespace {

// Ids beyond this are refused before anything is sized by them (real vocabularies: < 300k).
constexpr std::int64_t kMaxVocabId = (1 << 24) - 1;
// Ids without a token ("holes") allowed below the largest id; real vocabularies have none or few.
constexpr std::int64_t kMaxIdHoles = 1 << 20;

// code point -> byte, the inverse of gpt2_byte_to_unicode (code points used are < 324).
std::array<int, 324> make_unicode_to_byte() {
  std::array<int, 324> table;
  table.fill(-1);
  for (int b = 0; b < 256; ++b) table[gpt2_byte_to_unicode(static_cast<std::uint8_t>(b))] = b;
  return table;
}

// The bytes a vocabulary symbol stands for. A symbol made only of byte-table characters maps
// back byte by byte; any other (an added token such as "<|endoftext|>" is such a string only
// by accident) stands for its own UTF-8 text, as the Hugging Face ByteLevel decoder does.
std::string symbol_bytes(const std::string& symbol) {
  static const std::array<int, 324> to_byte = make_unicode_to_byte();
  std::string bytes;
  for (std::size_t pos = 0; pos < symbol.size();) {
    const auto c = unicode::decode_utf8(symbol, pos);
    if (!c.valid || c.cp >= to_byte.size() || to_byte[c.cp] < 0) return symbol;
    bytes.push_back(static_cast<char>(to_byte[c.cp]));
    pos += c.len;
  }
  return bytes;
}

}  // namespace

char32_t gpt2_byte_to_unicode(std::uint8_t b) {
  // Printable Latin-1 bytes stand for themselves; the other 68 move to U+0100.. in byte order.
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int x = 0; x < 256; ++x) {
      const bool printable = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE);
      t[x] = printable ? static_cast<char32_t>(x) : next++;
    }
    return t;
  }();
  return table[b];
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer(Spec spec)
    : source_(std::move(spec.source)),
      add_prefix_space_(spec.add_prefix_space),
      ignore_merges_(spec.ignore_merges),
      pretokenizer_(spec.pretokenizer),
      drop_missing_bytes_(spec.drop_missing_bytes) {
  std::int64_t max_id = -1;
  auto check_id = [&](const std::string& symbol, std::int64_t id) {
    QEVAL_CHECK(id >= 0 && id <= kMaxVocabId, "{}: token '{}' has id {}, expected 0..{}", source_, symbol, id,
                kMaxVocabId);
    max_id = std::max(max_id, id);
  };
  for (const auto& [symbol, id] : spec.vocab) check_id(symbol, id);
  for (const auto& [symbol, id] : spec.added) check_id(symbol, id);
  QEVAL_CHECK(max_id >= 0, "{}: the vocabulary is empty", source_);
  // Tables below are sized by the largest id: a few entries with huge ids must not cost gigabytes.
  const auto entries = static_cast<std::int64_t>(spec.vocab.size() + spec.added.size());
  QEVAL_CHECK(max_id < entries + kMaxIdHoles, "{}: largest id {} leaves more than {} unused ids below it ({} entries)",
              source_, max_id, kMaxIdHoles, entries);

  id_bytes_.resize(static_cast<std::size_t>(max_id + 1));
  id_present_.assign(id_bytes_.size(), false);
  std::vector<const std::string*> id_symbol(id_bytes_.size(), nullptr);
  vocab_.reserve(spec.vocab.size());
  for (const auto& [symbol, id] : spec.vocab) {
    if (id_present_[id]) {
      QEVAL_CHECK(*id_symbol[id] == symbol, "{}: id {} is used by both '{}' and '{}'", source_, id,
                  *id_symbol[id], symbol);
      continue;
    }
    QEVAL_CHECK(vocab_.emplace(symbol, id).second, "{}: token '{}' appears twice", source_, symbol);
    id_present_[id] = true;
    id_symbol[id] = &symbol;
    id_bytes_[id] = symbol_bytes(symbol);
  }
  // Added tokens may repeat vocabulary entries (HF lists <|endoftext|> in both); they decode
  // to their own text.
  for (const auto& [content, id] : spec.added) {
    if (id_present_[id]) {
      QEVAL_CHECK(*id_symbol[id] == content, "{}: added token '{}' reuses id {} of '{}'", source_, content, id,
                  *id_symbol[id]);
      continue;
    }
    id_present_[id] = true;
    id_symbol[id] = &content;
    id_bytes_[id] = content;
  }
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    unicode::append_utf8(gpt2_byte_to_unicode(static_cast<std::uint8_t>(b)), symbol);
    const auto it = vocab_.find(symbol);
    if (it == vocab_.end() && spec.drop_missing_bytes) {
      byte_ids_[b] = -1;
      continue;
    }
    QEVAL_CHECK(it != vocab_.end(),
                "{}: byte-level BPE needs all 256 byte symbols in the vocabulary; byte 0x{:02X} ('{}') is missing",
                source_, b, symbol);
    byte_ids_[b] = it->second;
  }

  pair_merges_.reserve(spec.merges.size());
  for (std::size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [a, b] = spec.merges[rank];
    const auto ia = vocab_.find(a);
    const auto ib = vocab_.find(b);
    const auto im = vocab_.find(a + b);
    QEVAL_CHECK(ia != vocab_.end(), "{}: merge {} ('{} {}') uses symbol '{}', which is not in the vocabulary",
                source_, rank + 1, a, b, a);
    QEVAL_CHECK(ib != vocab_.end(), "{}: merge {} ('{} {}') uses symbol '{}', which is not in the vocabulary",
                source_, rank + 1, a, b, b);
    QEVAL_CHECK(im != vocab_.end(), "{}: merge {} ('{} {}') makes '{}', which is not in the vocabulary", source_,
                rank + 1, a, b, a + b);
    // A repeated pair takes its later rank, as dict(zip(merges, range(n))) and HF's map do.
    pair_merges_[pair_key(ia->second, ib->second)] = Merge{static_cast<std::int32_t>(rank), im->second};
  }

  for (const auto& [content, id] : spec.added) {
    if (content == "<|endoftext|>") end_of_text_ = id;
  }
  if (!end_of_text_) {
    if (const auto it = vocab_.find("<|endoftext|>"); it != vocab_.end()) end_of_text_ = it->second;
  }
}

std::optional<std::int32_t> Gpt2BpeTokenizer::token_id(const std::string& symbol) const {
  const auto it = vocab_.find(symbol);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// Merges inside one pre-tokenised piece. The order is Hugging Face's: the pair with the lowest
// rank first, the leftmost of equal pairs first; a heap over a linked list keeps long pieces
// (long digit runs, URLs) at O(n log n). OpenAI's loop (merge every occurrence of the best
// pair, then look again) gives the same result because a merged symbol's own merges always
// rank after the merge that made it in a trained merge list.
void Gpt2BpeTokenizer::bpe(std::string_view piece, std::vector<std::int32_t>& out) const {
  // drop_missing_bytes: Hugging Face looks the whole piece up first (ignore_merges), then skips
  // the characters it has no id for and merges what is left.
  std::string kept;
  auto missing = [&](char ch) { return byte_ids_[static_cast<unsigned char>(ch)] < 0; };
  if (drop_missing_bytes_ && std::any_of(piece.begin(), piece.end(), missing)) {
    if (ignore_merges_) {
      std::string symbol;
      for (char ch : piece) unicode::append_utf8(gpt2_byte_to_unicode(static_cast<unsigned char>(ch)), symbol);
      if (const auto it = vocab_.find(symbol); it != vocab_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    std::copy_if(piece.begin(), piece.end(), std::back_inserter(kept), [&](char ch) { return !missing(ch); });
    if (kept.empty()) return;
    piece = kept;
  }
  const std::size_t n = piece.size();
  if (n == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    std::string symbol;
    for (char ch : piece) unicode::append_utf8(gpt2_byte_to_unicode(static_cast<unsigned char>(ch)), symbol);
    if (const auto it = vocab_.find(symbol); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    std::int32_t id;
    std::int32_t prev;  // -1 at the start
    std::int32_t next;  // n at the end
  };
  struct Candidate {
    std::int32_t rank;
    std::int32_t pos;  // index of the left symbol: positions never move, so it orders left to right
    std::int32_t left;
    std::int32_t right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Symbol> sym(n);
  for (std::size_t i = 0; i < n; ++i) {
    sym[i] = {byte_ids_[static_cast<unsigned char>(piece[i])], static_cast<std::int32_t>(i) - 1,
              static_cast<std::int32_t>(i) + 1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right >= static_cast<std::int32_t>(n)) return;
    const auto it = pair_merges_.find(pair_key(sym[left].id, sym[right].id));
    if (it != pair_merges_.end()) heap.push({it->second.rank, left, sym[left].id, sym[right].id});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) consider(static_cast<std::int32_t>(i), static_cast<std::int32_t>(i) + 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[c.pos];
    // Stale entries: the left symbol was absorbed (id -1) or either side changed since.
    if (left.id != c.left || left.next >= static_cast<std::int32_t>(n) || sym[left.next].id != c.right) continue;
    const std::int32_t right = left.next;
    left.id = pair_merges_.at(pair_key(c.left, c.right)).id;
    left.next = sym[right].next;
    if (left.next < static_cast<std::int32_t>(n)) sym[left.next].prev = c.pos;
    sym[right].id = -1;
    consider(left.prev, c.pos);
    consider(c.pos, left.next);
  }
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(n); i = sym[i].next) out.push_back(sym[i].id);
}

std::vector<std::int32_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  if (text.empty()) return ids;
  ids.reserve(text.size() / 3 + 4);
  std::string prefixed;
  if (add_prefix_space_ && text.front() != ' ') {
    prefixed = " ";
    prefixed.append(text);
    text = prefixed;
  }
  for (std::string_view piece : bpe_pretokenize(pretokenizer_, text)) bpe(piece, ids);
  return ids;
}

std::size_t Gpt2BpeTokenizer::continuation_cut(std::string_view text, std::size_t limit) const {
  constexpr std::size_t kMargin = 64;  // beyond any bounded look-ahead of the pre-tokenizers
  if (text.size() <= 2 * kMargin || limit <= 2 * kMargin) return 0;
  const std::string_view window = text.substr(0, std::min(limit + kMargin, text.size()));
  const std::vector<std::string_view> pieces = bpe_pretokenize(pretokenizer_, window);
  for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
    const auto s = static_cast<std::size_t>(it->data() - window.data());
    if (s > limit || s + kMargin > window.size()) continue;
    if (s < kMargin) break;
    const auto before = static_cast<unsigned char>(text[s - 1]);
    if (before > 0x20 && before < 0x7F) return s;
  }
  return 0;
}

std::vector<std::int32_t> Gpt2BpeTokenizer::encode_continuation(std::string_view text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (std::string_view piece : bpe_pretokenize(pretokenizer_, text)) bpe(piece, ids);
  return ids;
}

std::string Gpt2BpeTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    QEVAL_CHECK(id >= 0 && id < vocab_size() && id_present_[id],
                "{}: cannot decode token {} at position {}: not in the vocabulary (size {})", source_, id, i,
                vocab_size());
    text += id_bytes_[id];
  }
  return text;
}

}  // namespace qeval
