#include "loaders/tokenizers/gpt2_pretokenize.h"

#include <algorithm>

#include "loaders/tokenizers/gpt2_unicode.h"

namespace qeval {
namespace unicode {

CharClass classify(char32_t cp) {
  // White_Space (PropList.txt): stable since Unicode 6.3, so it is listed here, not generated.
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return CharClass::kSpace;
    default:
      break;
  }
  if (cp >= 0x2000 && cp <= 0x200A) return CharClass::kSpace;
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return CharClass::kLetter;
    if (cp >= '0' && cp <= '9') return CharClass::kNumber;
    return CharClass::kOther;
  }
  const CategoryRange* begin = kCategoryRanges;
  const CategoryRange* end = kCategoryRanges + kCategoryRangeCount;
  // First range whose upper end is >= cp.
  const CategoryRange* it =
      std::lower_bound(begin, end, cp, [](const CategoryRange& r, char32_t c) { return r.hi < c; });
  if (it != end && it->lo <= cp) return it->cls;
  return CharClass::kOther;
}

Utf8Char decode_utf8(std::string_view text, std::size_t pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  const Utf8Char invalid{b0, 1, false};
  if (b0 < 0x80) return {b0, 1, true};
  int len = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return invalid;
  }
  if (pos + len > text.size()) return invalid;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[pos + k]);
    if ((b & 0xC0) != 0x80) return invalid;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return invalid;
  return {cp, static_cast<std::uint8_t>(len), true};
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<ClassifiedChar> classify_text(std::string_view text) {
  std::vector<ClassifiedChar> chars;
  chars.reserve(text.size() + 1);
  for (std::size_t pos = 0; pos < text.size();) {
    const auto c = decode_utf8(text, pos);
    chars.push_back({pos, c.cp, c.valid ? classify(c.cp) : CharClass::kOther});
    pos += c.len;
  }
  chars.push_back({text.size(), 0, CharClass::kOther});  // sentinel: end of text
  return chars;
}

}  // namespace unicode

namespace {

using unicode::CharClass;

using Char = unicode::ClassifiedChar;
using unicode::classify_text;

std::size_t contraction_length(const std::vector<Char>& c, std::size_t i, std::size_t n) {
  if (c[i].cp != U'\'' || i + 1 >= n) return 0;
  const char32_t a = c[i + 1].cp;
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= n) return 0;
  const char32_t b = c[i + 2].cp;
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

}  // namespace

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  const std::vector<Char> c = classify_text(text);
  const std::size_t n = c.size() - 1;  // characters, without the sentinel
  std::vector<std::string_view> pieces;
  auto emit = [&](std::size_t from, std::size_t to) {
    pieces.push_back(text.substr(c[from].pos, c[to].pos - c[from].pos));
  };
  std::size_t i = 0;
  while (i < n) {
    if (std::size_t len = contraction_length(c, i, n)) {
      emit(i, i + len);
      i += len;
      continue;
    }
    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional ASCII space, then a run of
    // one class (for "other" the run stops at whitespace, letters and numbers alike).
    const std::size_t j = (c[i].cp == U' ') ? i + 1 : i;
    if (j < n && c[j].cls != CharClass::kSpace) {
      const CharClass cls = c[j].cls;
      std::size_t k = j + 1;
      while (k < n && c[k].cls == cls) ++k;
      emit(i, k);
      i = k;
      continue;
    }
    // Whitespace (c[i] is whitespace here). "\s+(?!\S)": the whole run at the end of the
    // text; before a non-space, the run minus its last character (when that leaves one);
    // otherwise "\s+" takes the single character.
    std::size_t k = i + 1;
    while (k < n && c[k].cls == CharClass::kSpace) ++k;
    const std::size_t to = (k == n || k - i == 1) ? k : k - 1;
    emit(i, to);
    i = to;
  }
  return pieces;
}

}  // namespace qeval
