// Process-wide allocator settings for evaluation.
#pragma once

namespace qeval {

// A forward pass allocates and frees the same large temporaries (attention scores, MLP
// activations, logits blocks) for every window, layer and scheme. An allocator that hands freed
// memory back to the system faults and zeroes it again on the next allocation:
//   - glibc serves every allocation above 32 MiB with a fresh mmap and unmaps it on free
//     (measured: 35–45 % of an evaluation's time); here large blocks stay in the heap and freed
//     memory is not trimmed;
//   - jemalloc (the qeval binary's allocator, CMakeLists.txt) purges freed pages on a decay
//     curve, continuously: SmolLM2-135M, 8 × 512, three schemes took 4.2 million page faults and
//     14.6 s, 0.23 million and 10.9 s with purging off (common/memory.cpp sets malloc_conf), at
//     +2 % peak RSS (docs/memory.md).
// Peak memory is what the live tensors need either way: freed memory is reused (any freed extent
// may be split for a smaller request, so it does not pile up window after window), not returned,
// until release_free_memory() or exit. Call once, first thing in main(). Harmless under
// sanitizers (their allocator ignores it).
void keep_freed_memory_for_reuse();

// Hands the memory freed so far back to the system (jemalloc: purge every arena; glibc: trim).
// A streamed plan calls it after each layer, so that what one layer freed does not stay resident
// beside the next one's weights: its peak stays that of one layer (the memory plan's promise).
void release_free_memory();

}  // namespace qeval
