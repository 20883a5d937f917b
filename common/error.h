// Errors. Library code throws qeval::Error with a message that names the operation or file,
// what was expected and what was found; only main() catches, prints one line and exits non-zero.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace qeval {

// Control bytes in a message (from a file's strings: a NUL inside a GGUF string, an escape
// sequence) written as \xHH, so main() prints the whole message and nothing a file holds can cut it
// short or drive the terminal. Newlines and tabs stay: some messages span lines on purpose.
// nlohmann's "[json.exception.parse_error.101] " tags are dropped too: the text after them says
// what is wrong (line, column, what was expected); the tag is the library's internal number.
inline std::string clean_message(const std::string& message) {
  std::string out;
  out.reserve(message.size());
  for (std::size_t i = 0; i < message.size(); ++i) {
    if (message.compare(i, 16, "[json.exception.") == 0) {
      const auto close = message.find("] ", i);
      if (close != std::string::npos && close - i < 48) {
        i = close + 1;
        continue;
      }
    }
    const char c = message[i];
    const auto b = static_cast<unsigned char>(c);
    if ((b < 0x20 && c != '\n' && c != '\t') || b == 0x7F)
      out += fmt::format("\\x{:02x}", b);
    else
      out += c;
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(clean_message(message)) {}
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
