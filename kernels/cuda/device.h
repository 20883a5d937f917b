// CUDA runtime access for plain C++ (tests, benchmarks, dispatch): the device probe, device
// memory, copies and event timing, with no CUDA header needed to include this file.
//
// Every function here exists in every build: kernels/cuda/device.cu implements them with the
// CUDA runtime when nvcc was found, and kernels/cuda/no_cuda.cpp otherwise (device_count() is 0
// and everything else throws CudaError). Nothing touches the driver before the first call, so a
// binary linked with CUDA starts and runs its CPU work on a machine without a GPU or driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// cudaStream_t is `CUstream_st*`; the forward declaration lets callers pass one without CUDA
// headers (nullptr is the legacy default stream).
struct CUstream_st;

namespace qeval::kernels::cuda {

using Stream = CUstream_st*;

// Thrown by every CUDA-side failure: the failing call's text, its file:line and the CUDA or
// cuBLAS error string (kernels/ depends on nothing of ours, so not qeval::Error).
class CudaError : public std::runtime_error {
 public:
  explicit CudaError(const std::string& message) : std::runtime_error(message) {}
};

// Floating-point element types of activations and outputs.
enum class FloatType { f32, f16, bf16 };
inline std::size_t size_of(FloatType t) { return t == FloatType::f32 ? 4 : 2; }
inline const char* to_string(FloatType t) { return t == FloatType::f32 ? "f32" : t == FloatType::f16 ? "f16" : "bf16"; }

// True when this build has the CUDA kernels (nvcc found at configure time).
bool kernels_built() noexcept;
// Devices usable now: 0 without CUDA kernels, without a driver or without a GPU. Never throws.
int device_count() noexcept;
// Why device_count() is 0 (or "" when it is not), for skip messages and records.
std::string no_device_reason();
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)" for records and benchmarks.
std::string device_description(int device = 0);
// "CUDA driver 13.0, runtime 13.0": what the driver supports and the runtime the kernels link.
std::string cuda_versions();

void* malloc_device(std::size_t bytes);
void free_device(void* pointer) noexcept;
void copy_to_device(void* device_dst, const void* host_src, std::size_t bytes);  // synchronous
void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes);    // synchronous
void copy_on_device(void* dst, const void* src, std::size_t bytes, Stream stream = nullptr);
void fill_bytes(void* device_dst, int byte, std::size_t bytes, Stream stream = nullptr);
void synchronize();  // the whole device: also surfaces errors of earlier asynchronous launches
// Free and total bytes of `device` (cudaMemGetInfo), for the memory planner.
std::pair<std::size_t, std::size_t> memory_info(int device = 0);

// Device time of each run of fn (its launches on `stream`), in milliseconds, measured with
// events around every run after `warmup` untimed runs. fn(i) receives the run index so a
// benchmark can rotate inputs and keep them out of L2.
std::vector<float> time_runs_ms(const std::function<void(int)>& fn, int warmup, int runs, Stream stream = nullptr);

// Owning device array of n elements of T (T trivially copyable); no raw new/delete for callers.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(std::size_t n) : n_(n), p_(n ? static_cast<T*>(malloc_device(n * sizeof(T))) : nullptr) {}
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (n_) copy_to_device(p_, host.data(), n_ * sizeof(T));
  }
  ~DeviceArray() { free_device(p_); }
  DeviceArray(DeviceArray&& o) noexcept : n_(std::exchange(o.n_, 0)), p_(std::exchange(o.p_, nullptr)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(n_, o.n_);
    std::swap(p_, o.p_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return p_; }
  std::size_t size() const { return n_; }
  std::vector<T> to_host() const {
    std::vector<T> host(n_);
    if (n_) copy_to_host(host.data(), p_, n_ * sizeof(T));
    return host;
  }

 private:
  std::size_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace qeval::kernels::cuda
