// Byte sizes as people write them ("300M", "6G", "1.5GiB", "123456") and as qeval prints them.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

namespace qeval {

// "300M" → 300·2^20. Suffixes K, M, G, T (optionally followed by B or iB, any case) are powers of
// 1024; a bare number is bytes. Throws naming `what` (the option) and the text when it is not a
// size of at least one byte.
std::int64_t parse_size(const std::string& text, const std::string& what);

// 1536 → "1.50 KiB", 6.4e9 → "5.96 GiB" (powers of 1024, three significant digits).
std::string format_bytes(std::int64_t bytes);

// Checked arithmetic for size and count estimates (memory plans, train's estimate): a byte or
// element count that would pass 2^63 - 1 saturates there instead of wrapping to a negative number
// that "fits" every budget. A saturated value stays saturated through + and *, and through - and /
// of an ordinary one: an estimate past 64 bits never fits, never becomes small again.
class Size {
 public:
  static constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr Size(std::int64_t v = 0) : v_(v) {}  // NOLINT: implicit, so counts mix with Sizes
  constexpr std::int64_t value() const { return v_; }
  constexpr bool saturated() const { return v_ == kMax; }
  friend Size operator+(Size a, Size b) {
    std::int64_t r = 0;
    return a.saturated() || b.saturated() || __builtin_add_overflow(a.v_, b.v_, &r) ? Size(kMax) : Size(r);
  }
  friend Size operator-(Size a, Size b) {
    std::int64_t r = 0;
    if (a.saturated()) return a;
    return b.saturated() || __builtin_sub_overflow(a.v_, b.v_, &r) ? Size(std::numeric_limits<std::int64_t>::min()) : Size(r);
  }
  friend Size operator*(Size a, Size b) {
    std::int64_t r = 0;
    if (a.v_ == 0 || b.v_ == 0) return Size(0);
    return a.saturated() || b.saturated() || __builtin_mul_overflow(a.v_, b.v_, &r) ? Size(kMax) : Size(r);
  }
  friend Size operator/(Size a, Size b) { return a.saturated() ? a : Size(a.v_ / b.v_); }
  Size& operator+=(Size b) { return *this = *this + b; }
  friend bool operator<(Size a, Size b) { return a.v_ < b.v_; }
  friend bool operator>(Size a, Size b) { return a.v_ > b.v_; }
  friend bool operator<=(Size a, Size b) { return a.v_ <= b.v_; }
  friend bool operator>=(Size a, Size b) { return a.v_ >= b.v_; }
  friend bool operator==(Size a, Size b) { return a.v_ == b.v_; }
  friend bool operator!=(Size a, Size b) { return a.v_ != b.v_; }

 private:
  std::int64_t v_;
};
inline Size max(Size a, Size b) { return a < b ? b : a; }
inline Size min(Size a, Size b) { return a < b ? a : b; }
inline void to_json(nlohmann::json& j, Size s) { j = s.value(); }

// format_bytes, or "more than 8 EiB" for a saturated estimate.
std::string format_size(Size bytes);

}  // namespace qeval
