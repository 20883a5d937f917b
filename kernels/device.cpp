#include "kernels/device.h"

#include "kernels/cuda/device.h"
#ifdef QEVAL_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>

#include "kernels/cuda/adapter_torch.h"
#endif

namespace qeval::kernels {

void synchronize(const at::Device& device) {
  if (device.is_cuda()) cuda::synchronize();
}

DeviceMemory device_memory(const at::Device& device) {
  TORCH_CHECK(device.is_cuda(), "device_memory: ", device.str(), " is not a GPU");
  const auto [free, total] = cuda::memory_info(device.has_index() ? device.index() : 0);
  return {static_cast<std::int64_t>(free), static_cast<std::int64_t>(total)};
}

std::int64_t peak_allocated_bytes(const at::Device& device) {
#ifdef QEVAL_TORCH_HAS_CUDA
  if (!device.is_cuda()) return 0;
  // Index 0 of every stat array is the aggregate over the small and large pools, in LibTorch 1.x
  // (c10::cuda::CUDACachingAllocator::DeviceStats) and 2.x (c10::CachingDeviceAllocator::DeviceStats).
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.has_index() ? device.index() : 0);
  return static_cast<std::int64_t>(stats.allocated_bytes[0].peak);
#else
  (void)device;
  return 0;
#endif
}

int gpu_count() { return cuda::device_count(); }
std::string no_gpu_reason() { return cuda::no_device_reason(); }
std::string gpu_description(int index) { return cuda::device_description(index); }
std::string gpu_versions() { return cuda::cuda_versions(); }

void release_cached_weights() {
#ifdef QEVAL_TORCH_HAS_CUDA
  cuda::w4_linear_cuda_clear_cache();
#endif
}

}  // namespace qeval::kernels
