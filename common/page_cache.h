// Reading ahead of the evaluation: the file ranges of the next layer are read into the page cache
// on another thread while the current layer computes, so that a checkpoint larger than what the
// page cache already holds is read from disk in the shadow of the compute instead of before it.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <vector>

namespace qeval {

// Bytes [offset, offset + bytes) of a file.
struct FileSpan {
  std::filesystem::path path;
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

// One read-ahead at a time, on its own thread at idle priority (SCHED_IDLE where Linux has it): it
// runs on the cores the evaluation leaves idle, and never preempts its threads, which wait for
// each other at every parallel region. A read-ahead is a hint: a file that cannot be opened or
// read is skipped in silence (the real read that follows reports it), and a new read-ahead stops
// the one before, whose bytes the reads are by then taking themselves.
class PageCacheWarmer {
 public:
  PageCacheWarmer() = default;
  ~PageCacheWarmer();  // waits for the read-ahead in flight
  PageCacheWarmer(const PageCacheWarmer&) = delete;
  PageCacheWarmer& operator=(const PageCacheWarmer&) = delete;

  // Stops the previous read-ahead, then starts reading `spans` (nothing when empty).
  void warm(std::vector<FileSpan> spans);
  // Stops the read-ahead in flight, if any, and waits for its thread.
  void stop();

 private:
  std::future<void> in_flight_;
  std::shared_ptr<std::atomic<bool>> stop_;
};

// Reads the spans through a small buffer and drops the bytes: afterwards they are in the page
// cache, as far as it holds them. Checks `stop` (when given) between reads of 4 MiB. Returns the
// bytes read.
std::uint64_t read_into_page_cache(const std::vector<FileSpan>& spans, const std::atomic<bool>* stop = nullptr);

}  // namespace qeval
