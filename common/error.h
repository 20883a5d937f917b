// Errors. Library code throws qeval::Error with a message that names the operation or file,
// what was expected and what was found; only main() catches, prints one line and exits non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace qeval {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws qeval::Error with an fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace qeval

// QEVAL_CHECK(cond, "fmt {}", args...): throws qeval::Error when cond is false.
#define QEVAL_CHECK(cond, ...)          \
  do {                                  \
    if (!(cond)) ::qeval::fail(__VA_ARGS__); \
  } while (0)
