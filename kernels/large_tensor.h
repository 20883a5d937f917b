// A CPU tensor for a large result written once in full (a quantiser's output weight): from 32 MiB
// on (where glibc always maps fresh memory), its memory is 2 MiB aligned and advised as
// transparent huge pages (madvise MADV_HUGEPAGE),
// so that writing it takes one page fault per 2 MiB instead of one per 4 KiB, and freeing it
// unmaps 512 times fewer page-table entries. Quantising one Llama-3-8B layer to fp8 spent 43 % of
// its time in page faults and 7 % in munmap with LibTorch's allocator (perf, Zen 4; issue 66).
// The advice is only advice: where THP is off ("never") the pages are ordinary ones, as before.
// Smaller tensors come from at::empty unchanged: malloc's heap reuses their freed memory without
// page faults, which huge pages would only slow down.
#pragma once

#include <ATen/ATen.h>

namespace qeval::kernels {

at::Tensor empty_written_once(at::IntArrayRef sizes, at::ScalarType type);

}  // namespace qeval::kernels
