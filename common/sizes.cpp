#include "common/sizes.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace qeval {

std::int64_t parse_size(const std::string& text, const std::string& what) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  std::string unit(end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  for (auto [prefix, factor] : {std::pair{"K", 1024.0}, std::pair{"M", 1024.0 * 1024}, std::pair{"G", 1024.0 * 1024 * 1024},
                                std::pair{"T", 1024.0 * 1024 * 1024 * 1024}})
    if (unit == prefix || unit == std::string(prefix) + "B" || unit == std::string(prefix) + "IB") scale = factor;
  // At least one byte: "0.5B" would round to 0, which the planners read as "no cap" (issue 51).
  QEVAL_CHECK(end != begin && scale > 0 && std::isfinite(number) && number * scale >= 1 && number * scale < 9.0e18,
              "{} '{}': expected a size of at least one byte, such as 300M, 6G or 1.5GiB (suffixes K, M, G, T are powers "
              "of 1024)", what, text);
  return static_cast<std::int64_t>(number * scale);
}

std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::fabs(value) >= 1024 && unit < 4) value /= 1024, ++unit;
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format(value >= 100 ? "{:.0f} {}" : value >= 10 ? "{:.1f} {}" : "{:.2f} {}", value, units[unit]);
}

std::string format_size(Size bytes) {
  return bytes.saturated() ? std::string("more than 8 EiB (the estimate passed 64 bits)") : format_bytes(bytes.value());
}

}  // namespace qeval
