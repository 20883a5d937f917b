// The CUDA-runtime side of kernels/cuda/device.h. The probe is lazy and caught: a machine with
// no driver or no GPU gets device_count() == 0 and a reason, never a crash at start-up.
#include <cuda_runtime.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda {
namespace {

struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static Probe result;
  static std::once_flag once;
  std::call_once(once, [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      // cudaErrorInsufficientDriver without libcuda, cudaErrorNoDevice without a GPU.
      result.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
      cudaGetLastError();  // the failed probe must not poison later error checks
      return;
    }
    result.count = n;
    if (n == 0) result.reason = "cudaGetDeviceCount: no CUDA device";
  });
  return result;
}

}  // namespace

bool kernels_built() noexcept { return true; }

int device_count() noexcept {
  try {
    return probe().count;
  } catch (...) {
    return 0;
  }
}

std::string no_device_reason() { return probe().reason; }

std::string device_description(int device) {
  cudaDeviceProp prop{};
  QEVAL_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.1f", static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
         std::to_string(prop.multiProcessorCount) + " SMs, " + gib + " GiB, L2 " +
         std::to_string(prop.l2CacheSize >> 20) + " MiB)";
}

std::string cuda_versions() {
  int driver = 0, runtime = 0;
  QEVAL_CUDA_CHECK(cudaDriverGetVersion(&driver));
  QEVAL_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  auto dotted = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  return "CUDA driver " + dotted(driver) + ", runtime " + dotted(runtime);
}

void* malloc_device(std::size_t bytes) {
  void* p = nullptr;
  QEVAL_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

void free_device(void* pointer) noexcept {
  if (pointer) cudaFree(pointer);  // a destructor must not throw; a failed free leaks at worst
}

void copy_to_device(void* device_dst, const void* host_src, std::size_t bytes) {
  QEVAL_CUDA_CHECK(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) {
  QEVAL_CUDA_CHECK(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost));
}

void copy_on_device(void* dst, const void* src, std::size_t bytes, Stream stream) {
  QEVAL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void fill_bytes(void* device_dst, int byte, std::size_t bytes, Stream stream) {
  QEVAL_CUDA_CHECK(cudaMemsetAsync(device_dst, byte, bytes, stream));
}

void synchronize() { QEVAL_CUDA_CHECK(cudaDeviceSynchronize()); }

std::pair<std::size_t, std::size_t> memory_info(int device) {
  int current = 0;
  QEVAL_CUDA_CHECK(cudaGetDevice(&current));
  QEVAL_CUDA_CHECK(cudaSetDevice(device));
  std::size_t free = 0, total = 0;
  const cudaError_t status = cudaMemGetInfo(&free, &total);
  QEVAL_CUDA_CHECK(cudaSetDevice(current));
  QEVAL_CUDA_CHECK(status);
  return {free, total};
}

std::vector<float> time_runs_ms(const std::function<void(int)>& fn, int warmup, int runs, Stream stream) {
  for (int i = 0; i < warmup; ++i) fn(i);
  // One event between consecutive runs: no host round trip inside the timed region.
  std::vector<cudaEvent_t> events(static_cast<std::size_t>(runs) + 1);
  for (auto& e : events) QEVAL_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<float> ms(static_cast<std::size_t>(runs));
  try {
    QEVAL_CUDA_CHECK(cudaEventRecord(events[0], stream));
    for (int i = 0; i < runs; ++i) {
      fn(warmup + i);
      QEVAL_CUDA_CHECK(cudaEventRecord(events[i + 1], stream));
    }
    QEVAL_CUDA_CHECK(cudaEventSynchronize(events[runs]));
    for (int i = 0; i < runs; ++i) QEVAL_CUDA_CHECK(cudaEventElapsedTime(&ms[i], events[i], events[i + 1]));
  } catch (...) {
    for (auto& e : events) cudaEventDestroy(e);
    throw;
  }
  for (auto& e : events) cudaEventDestroy(e);
  return ms;
}

}  // namespace qeval::kernels::cuda
