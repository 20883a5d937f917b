#include "eval/progress.h"

#include <fmt/core.h>
#include <unistd.h>

namespace qeval {

Progress::Progress(bool enabled, std::int64_t total)
    : enabled_(enabled), tty_(::isatty(STDERR_FILENO) != 0), total_(total), start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

void Progress::update(std::int64_t done, double running_ppl, std::int64_t tokens) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  // On a terminal redraw often; in logs print a line every 10 s so CI output stays short.
  double since = std::chrono::duration<double>(now - last_print_).count();
  bool last = total_ > 0 && done == total_;
  if (!last && since < (tty_ ? 0.2 : 10.0)) return;
  last_print_ = now;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  std::string eta = "?";
  if (total_ > 0 && done > 0) {
    auto left = static_cast<std::int64_t>(elapsed / static_cast<double>(done) * static_cast<double>(total_ - done));
    eta = fmt::format("{}:{:02}", left / 60, left % 60);
  }
  std::string count = total_ > 0 ? fmt::format("{}/{}", done, total_) : fmt::format("{}", done);
  fmt::print(stderr, "{}[{}] windows, ETA {}, {:.0f} tok/s, running PPL {:.4f}{}", tty_ ? "\r" : "", count, eta,
             static_cast<double>(tokens) / std::max(elapsed, 1e-9), running_ppl, tty_ ? "" : "\n");
  std::fflush(stderr);
}

void Progress::update_partial(double done, const std::string& where) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_print_).count() < (tty_ ? 0.2 : 10.0)) return;
  last_print_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  std::string eta = "?";
  if (total_ > 0 && done > 0) {
    auto left = static_cast<std::int64_t>(elapsed / done * (static_cast<double>(total_) - done));
    eta = fmt::format("{}:{:02}", left / 60, left % 60);
  }
  std::string count = total_ > 0 ? fmt::format("{:.1f}/{}", done, total_) : fmt::format("{:.1f}", done);
  fmt::print(stderr, "{}[{}] windows, {}, ETA {}{}", tty_ ? "\r" : "", count, where, eta, tty_ ? "\033[K" : "\n");
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && tty_) fmt::print(stderr, "\n");
}

}  // namespace qeval
