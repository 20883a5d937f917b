#include "loaders/tokenizers/bpe_pretokenizers.h"

#include "loaders/tokenizers/gpt2_pretokenize.h"
#include "loaders/tokenizers/gpt2_unicode.h"

namespace qeval {

namespace {

using unicode::CharClass;

using Char = unicode::ClassifiedChar;
using unicode::classify_text;

bool is_cr_or_lf(char32_t cp) { return cp == U'\r' || cp == U'\n'; }

// `cp` equals the ASCII letter `lower` ignoring case, with Unicode simple case folding:
// U+017F LATIN SMALL LETTER LONG S folds to 's'.
bool same_letter_ignoring_case(char32_t cp, char lower) {
  if (cp == static_cast<char32_t>(lower) || cp == static_cast<char32_t>(lower - 'a' + 'A')) return true;
  return lower == 's' && cp == 0x17F;
}

// Length in characters of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, 0 when none matches.
std::size_t contraction_length_ignoring_case(const std::vector<Char>& c, std::size_t i, std::size_t n) {
  if (c[i].cp != U'\'' || i + 1 >= n) return 0;
  const char32_t a = c[i + 1].cp;
  for (char one : {'s', 't', 'm', 'd'})
    if (same_letter_ignoring_case(a, one)) return 2;
  if (i + 2 >= n) return 0;
  const char32_t b = c[i + 2].cp;
  for (const char* two : {"re", "ve", "ll"})
    if (same_letter_ignoring_case(a, two[0]) && same_letter_ignoring_case(b, two[1])) return 3;
  return 0;
}

// Llama 3's regex, with at most `max_digits` numbers in one piece (3 for Llama 3, 1 for Qwen2).
std::vector<std::string_view> llama3_pretokenize(std::string_view text, std::size_t max_digits) {
  const std::vector<Char> c = classify_text(text);
  const std::size_t n = c.size() - 1;
  std::vector<std::string_view> pieces;
  auto emit = [&](std::size_t from, std::size_t to) {
    pieces.push_back(text.substr(c[from].pos, c[to].pos - c[from].pos));
  };
  std::size_t i = 0;
  while (i < n) {
    if (const std::size_t len = contraction_length_ignoring_case(c, i, n)) {
      emit(i, i + len);
      i += len;
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+ : a letter run, optionally led by one character that is neither
    // CR, LF, letter nor number (a space, a tab, punctuation...).
    {
      const bool may_lead = c[i].cls != CharClass::kLetter && c[i].cls != CharClass::kNumber && !is_cr_or_lf(c[i].cp);
      const std::size_t j = may_lead ? i + 1 : i;
      if (j < n && c[j].cls == CharClass::kLetter) {
        std::size_t k = j + 1;
        while (k < n && c[k].cls == CharClass::kLetter) ++k;
        emit(i, k);
        i = k;
        continue;
      }
    }
    // \p{N}{1,max_digits}
    if (c[i].cls == CharClass::kNumber) {
      std::size_t k = i + 1;
      while (k < n && k - i < max_digits && c[k].cls == CharClass::kNumber) ++k;
      emit(i, k);
      i = k;
      continue;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*" : an optional ASCII space, a run of "other", then CR/LF run.
    {
      const std::size_t j = c[i].cp == U' ' ? i + 1 : i;
      if (j < n && c[j].cls == CharClass::kOther) {
        std::size_t k = j + 1;
        while (k < n && c[k].cls == CharClass::kOther) ++k;
        while (k < n && is_cr_or_lf(c[k].cp)) ++k;
        emit(i, k);
        i = k;
        continue;
      }
    }
    // c[i] is whitespace here; [i, k) is its whole run.
    std::size_t k = i + 1;
    while (k < n && c[k].cls == CharClass::kSpace) ++k;
    // \s*[\r\n]+ : \s* backtracks to the last CR/LF of the run, and [\r\n]+ takes only that
    // one (what follows it in the run is not CR/LF).
    std::size_t last_newline = k;
    for (std::size_t m = k; m > i; --m) {
      if (is_cr_or_lf(c[m - 1].cp)) {
        last_newline = m - 1;
        break;
      }
    }
    if (last_newline < k) {
      emit(i, last_newline + 1);
      i = last_newline + 1;
      continue;
    }
    // \s+(?!\S) : the whole run at the end of the text; before a non-space, the run minus its
    // last character when that leaves one; otherwise \s+ takes the single character.
    const std::size_t to = (k == n || k - i == 1) ? k : k - 1;
    emit(i, to);
    i = to;
  }
  return pieces;
}

// Each \p{N} character alone; GPT-2's regex on the runs between them.
std::vector<std::string_view> smollm_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  std::size_t run_start = 0;
  auto flush_run = [&](std::size_t end) {
    if (end > run_start) {
      for (std::string_view piece : gpt2_pretokenize(text.substr(run_start, end - run_start))) pieces.push_back(piece);
    }
  };
  for (std::size_t pos = 0; pos < text.size();) {
    const auto ch = unicode::decode_utf8(text, pos);
    if (ch.valid && unicode::classify(ch.cp) == CharClass::kNumber) {
      flush_run(pos);
      pieces.push_back(text.substr(pos, ch.len));
      run_start = pos + ch.len;
    }
    pos += ch.len;
  }
  flush_run(text.size());
  return pieces;
}

}  // namespace

std::string_view bpe_pretokenizer_name(BpePretokenizer p) {
  switch (p) {
    case BpePretokenizer::kGpt2:
      return "gpt2";
    case BpePretokenizer::kSmollm:
      return "smollm";
    case BpePretokenizer::kLlama3:
      return "llama3";
    case BpePretokenizer::kQwen2:
      return "qwen2";
  }
  return "unknown";
}

std::vector<std::string_view> bpe_pretokenize(BpePretokenizer p, std::string_view text) {
  switch (p) {
    case BpePretokenizer::kGpt2:
      return gpt2_pretokenize(text);
    case BpePretokenizer::kSmollm:
      return smollm_pretokenize(text);
    case BpePretokenizer::kLlama3:
      return llama3_pretokenize(text, 3);
    case BpePretokenizer::kQwen2:
      return llama3_pretokenize(text, 1);
  }
  return gpt2_pretokenize(text);
}

}  // namespace qeval
