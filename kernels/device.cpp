#include "kernels/device.h"

#include "kernels/cuda/device.h"
#ifdef QEVAL_TORCH_HAS_CUDA
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
