#include "cli/option_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/printable.h"
#include "common/sizes.h"
#include "kernels/compute_threads.h"

namespace qeval::cli {
namespace {

std::string integer_range_text(std::int64_t lo, std::int64_t hi) {
  if (hi == std::numeric_limits<std::int64_t>::max()) return fmt::format("an integer >= {}", lo);
  return fmt::format("an integer in {}..{}", lo, hi);
}

std::string number_range_text(double lo, double hi, bool lo_open, bool hi_open) {
  if (std::isinf(hi)) return fmt::format("a finite number {} {}", lo_open ? ">" : ">=", lo);
  return fmt::format("a finite number in {}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
}

}  // namespace

CLI::Validator output_path() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty()) return "an empty path writes nothing; give a file or folder name";
        return "";
      },
      "PATH");
}

CLI::Validator byte_size(const std::string& option) {
  return CLI::Validator(
      [option](std::string& text) -> std::string {
        if (text.empty()) return "an empty size is not \"no cap\"; give a size such as 300M or 6G, or leave the option out";
        try {
          parse_size(text, option);
        } catch (const Error& e) {
          return e.what();
        }
        return "";
      },
      "SIZE");
}

CLI::Validator integer_in(std::int64_t lo, std::int64_t hi) {
  const std::string expected = integer_range_text(lo, hi);
  return CLI::Validator(
      [lo, hi, expected](std::string& text) -> std::string {
        std::int64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc() || ptr != end || text.empty())
          return fmt::format("{} is not {}", in_quotes(text), expected);
        if (v < lo || v > hi) return fmt::format("{} is outside the range: expected {}", v, expected);
        return "";
      },
      hi == std::numeric_limits<std::int64_t>::max() ? fmt::format("INT>={}", lo) : fmt::format("INT:{}..{}", lo, hi));
}

CLI::Validator number_in(double lo, double hi, bool lo_open, bool hi_open) {
  const std::string expected = number_range_text(lo, hi, lo_open, hi_open);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size())
          return fmt::format("{} is not {}", in_quotes(text), expected);
        const bool inside = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
        if (!inside) return fmt::format("{} is outside the range: expected {}", in_quotes(text), expected);
        return "";
      },
      std::isinf(hi) ? fmt::format("NUM{}{}", lo_open ? ">" : ">=", lo)
                     : fmt::format("NUM:{}{},{}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]"));
}

CLI::Validator positive_number() { return number_in(0, INFINITY, true, false); }

int cap_threads(std::int64_t requested, const char* option) {
  const std::int64_t hardware =
      std::max<std::int64_t>({1, static_cast<std::int64_t>(std::thread::hardware_concurrency()), kernels::available_cores()});
  if (requested <= hardware) return static_cast<int>(requested);
  fmt::print(stderr, "note: {} {} is more than the {} hardware threads; using {}\n", option, requested, hardware, hardware);
  return static_cast<int>(hardware);
}

}  // namespace qeval::cli
