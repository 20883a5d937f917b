// Process-wide allocator settings for evaluation.
#pragma once

namespace qeval {

// glibc serves every allocation above 32 MiB with a fresh mmap and unmaps it on free, so a
// forward pass that allocates its logits (L × vocabulary floats: 200 MB for GPT-2 at 1024) and
// their log-probabilities page-faults and zeroes that memory again on every window: measured
// here, 35–45 % of an evaluation's time. This keeps large blocks in the heap (no mmap for
// chunks, no trimming of freed memory), so a window reuses the previous window's memory. Peak
// memory is unchanged; freed memory is not returned to the system until exit. Call once, first
// thing in main(). Harmless under sanitizers (their allocator ignores it).
void keep_freed_memory_for_reuse();

}  // namespace qeval
