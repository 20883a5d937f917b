#include "common/page_cache.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

namespace qeval {

std::uint64_t read_into_page_cache(const std::vector<FileSpan>& spans, const std::atomic<bool>* stop) {
  // pread through a buffer rather than readahead(2) / POSIX_FADV_WILLNEED: on a virtual disk those
  // hints made the later read slower than a cold one, where an ordinary read streams at the disk's
  // speed and the copy to the buffer costs a few ms per 100 MB.
  constexpr std::uint64_t kBuffer = 4ull << 20;
  std::unique_ptr<char[]> buffer(new char[kBuffer]);
  std::uint64_t total = 0;
  for (const FileSpan& span : spans) {
    const int fd = ::open(span.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    for (std::uint64_t done = 0; done < span.bytes && !(stop && stop->load(std::memory_order_relaxed));) {
      const std::uint64_t n = std::min(kBuffer, span.bytes - done);
      const ssize_t got = ::pread(fd, buffer.get(), n, static_cast<off_t>(span.offset + done));
      if (got <= 0) break;
      done += static_cast<std::uint64_t>(got);
      total += static_cast<std::uint64_t>(got);
    }
    ::close(fd);
  }
  return total;
}

PageCacheWarmer::~PageCacheWarmer() { stop(); }

void PageCacheWarmer::stop() {
  if (stop_) stop_->store(true);
  if (in_flight_.valid()) in_flight_.get();
  stop_.reset();
}

void PageCacheWarmer::warm(std::vector<FileSpan> spans) {
  stop();
  if (spans.empty()) return;
  stop_ = std::make_shared<std::atomic<bool>>(false);
  in_flight_ = std::async(std::launch::async, [spans = std::move(spans), stop = stop_] {
#ifdef SCHED_IDLE
    const sched_param idle{};
    sched_setscheduler(0, SCHED_IDLE, &idle);  // this thread only (Linux); a refusal leaves it as it was
#endif
    read_into_page_cache(spans, stop.get());
  });
}

}  // namespace qeval
