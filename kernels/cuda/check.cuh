// Error checks for the .cu files (needs CUDA headers; plain C++ includes device.h instead).
// Like Marian's CUDA_CHECK: the failing call's text and file:line go into the message, and
// the error is thrown as CudaError, never printed-and-aborted.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda::detail {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cublasLtGetStatusName(s) + " (" + cublasLtGetStatusString(s) + ")");
}

[[noreturn]] inline void throw_check(const std::string& message, const char* file, int line) {
  throw CudaError(message + " [" + file + ":" + std::to_string(line) + "]");
}

}  // namespace qeval::kernels::cuda::detail

#define QEVAL_CUDA_CHECK(call)                                                                  \
  do {                                                                                          \
    const cudaError_t qeval_cuda_status_ = (call);                                              \
    if (qeval_cuda_status_ != cudaSuccess)                                                      \
      ::qeval::kernels::cuda::detail::throw_cuda(qeval_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define QEVAL_CUBLAS_CHECK(call)                                                                    \
  do {                                                                                              \
    const cublasStatus_t qeval_cublas_status_ = (call);                                             \
    if (qeval_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                              \
      ::qeval::kernels::cuda::detail::throw_cublas(qeval_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: configuration errors surface here, named, not at some later call.
// cudaGetLastError (not Peek) clears a non-sticky launch error so the next check is not stale.
#define QEVAL_CUDA_CHECK_LAUNCH(kernel_name)                                                         \
  do {                                                                                               \
    const cudaError_t qeval_cuda_status_ = cudaGetLastError();                                       \
    if (qeval_cuda_status_ != cudaSuccess)                                                           \
      ::qeval::kernels::cuda::detail::throw_cuda(qeval_cuda_status_, "launch of " #kernel_name, __FILE__, \
                                                 __LINE__);                                          \
  } while (0)

// Argument checks in host wrappers: QEVAL_CUDA_EXPECT(k % 4 == 0, "int8_gemm: K must ...").
#define QEVAL_CUDA_EXPECT(cond, message)                                              \
  do {                                                                                \
    if (!(cond)) ::qeval::kernels::cuda::detail::throw_check((message), __FILE__, __LINE__); \
  } while (0)
