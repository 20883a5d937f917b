// The accelerator as the rest of qeval sees it: synchronisation, free memory and dropping what
// the kernels cache per weight, for a device given as an at::Device. One header for every caller
// outside kernels/ (the evaluator, placement), so none of them includes kernels/cuda/ directly;
// on the CPU every function is a no-op or reports the host. No build flags here: kernels/device.cpp
// dispatches to kernels/cuda/device.h, which every build has (with or without the CUDA kernels).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace qeval::kernels {

// Waits for the work queued on `device` (a GPU): timing and error surfacing. No-op on the CPU.
void synchronize(const at::Device& device);

// Free and total bytes of a GPU's memory (cudaMemGetInfo). Throws for the CPU.
struct DeviceMemory {
  std::int64_t free = 0, total = 0;
};
DeviceMemory device_memory(const at::Device& device);

// The most memory LibTorch's caching allocator had allocated on a GPU at once since the process
// started (what torch.cuda.max_memory_allocated reports); 0 for the CPU or without a CUDA LibTorch.
std::int64_t peak_allocated_bytes(const at::Device& device);

// CUDA devices usable now (0 without a GPU, a driver or CUDA kernels), and why there are none.
int gpu_count();
std::string no_gpu_reason();
// "NVIDIA H100 80GB HBM3 (sm_90, ...)", and "CUDA driver …, runtime …".
std::string gpu_description(int index);
std::string gpu_versions();

// Drops what the GPU kernels cache for weights (the 4-bit path's dequantised weights): a plan
// that streams layers calls it when a layer's weights are freed, so the cache holds no layer the
// plan has moved past. No-op where nothing is cached.
void release_cached_weights();

}  // namespace qeval::kernels
