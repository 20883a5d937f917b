#include "common/memory.h"

#include <malloc.h>

#include <climits>
#include <cstddef>

// jemalloc reads this string at start-up when it is the process's allocator (the qeval binary);
// anywhere else it is an unused global. Purging off: freed pages are kept for reuse (memory.h).
// With purging off a freed extent is resident until exit, so any of them may be split to serve a
// smaller request: jemalloc's default (lg_extent_max_active_fit 6) skips a freed extent more than
// 64 times the request, and freed neighbours coalesce into ever larger extents that no request
// could reuse, so each window mapped new memory (docs/memory.md: 807 MB against 309 MB).
// MALLOC_CONF in the environment still overrides it.
extern "C" {
extern const char* malloc_conf;
const char* malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1,lg_extent_max_active_fit:63";
// Present only when jemalloc is linked (weak: null otherwise).
int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp, std::size_t newlen) __attribute__((weak));
}

namespace qeval {

void keep_freed_memory_for_reuse() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

void release_free_memory() {
  if (mallctl) {
    mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);  // 4096: MALLCTL_ARENAS_ALL
    return;
  }
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace qeval
