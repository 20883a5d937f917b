#include "common/memory.h"

#include <malloc.h>

#include <climits>

namespace qeval {

void keep_freed_memory_for_reuse() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

}  // namespace qeval
