#include "kernels/large_tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace qeval::kernels {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
// Below glibc's largest mmap threshold (32 MiB on 64-bit) a freed block goes back to malloc's heap
// and the next tensor of that size reuses it without faulting a page in: on SmolLM2-135M's
// 1.3-3.5 MB weights, advising huge pages made fp8 quantisation 4x slower than at::empty.
constexpr std::size_t kSmallestAdvised = std::size_t{32} << 20;

}  // namespace

at::Tensor empty_written_once(at::IntArrayRef sizes, at::ScalarType type) {
  const auto options = at::TensorOptions().dtype(type);
  std::size_t elements = 1;
  for (const std::int64_t s : sizes) elements *= static_cast<std::size_t>(s);
  const std::size_t bytes = elements * at::elementSize(type);
  if (bytes < kSmallestAdvised) return at::empty(sizes, options);
  const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* memory = nullptr;
  if (posix_memalign(&memory, kHugePage, rounded) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  (void)madvise(memory, rounded, MADV_HUGEPAGE);  // advice: refused or ignored, the pages are ordinary ones
#endif
  return at::from_blob(memory, sizes, [](void* p) { std::free(p); }, options);
}

}  // namespace qeval::kernels
