// GEMMs through cuBLASLt on raw device pointers, all in the nn.Linear layout (row-major,
// contiguous): x [M, K] · w [N, K]ᵀ → y [M, N]. Plain C++ header; see cublaslt_plan.cuh for the
// layout cuBLASLt is given and why, and device.h for streams and errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda {

// The int32 accumulator is exact while 127² · K < 2³¹.
constexpr std::int64_t kInt8GemmMaxK = 133143;

// Empty when int8_gemm_s32 accepts the shape, otherwise why not. cuBLASLt's int8 IMMA kernels
// (regular data order, "TN") want the leading dimensions K and N multiples of 4.
std::string int8_gemm_unsupported_reason(std::int64_t m, std::int64_t n, std::int64_t k);

// c[M, N] int32 = a[M, K] int8 · b[N, K]ᵀ int8, exact (s8 × s8 → s32 on the tensor cores).
// a: quantised activations, one token per row; b: quantised weights, one output channel per row.
// Pointers must be 4-byte aligned (16 or more is faster). Throws CudaError naming the shape when
// int8_gemm_unsupported_reason is not empty, before touching the device.
void int8_gemm_s32(const std::int8_t* a, const std::int8_t* b, std::int32_t* c, std::int64_t m, std::int64_t n,
                   std::int64_t k, Stream stream = nullptr);

// y[M, N] fp16 = x[M, K] fp16 · w[N, K]ᵀ fp16 with fp32 accumulation: the fp16 baseline of the
// benchmarks and the float GEMM of dequantise-then-GEMM fallbacks. fp16 buffers are passed as
// void* (IEEE binary16, 2 bytes per element).
void fp16_gemm(const void* x, const void* w, void* y, std::int64_t m, std::int64_t n, std::int64_t k,
               Stream stream = nullptr);

// The same for x, w, y all of `type` f16 or bf16 (fp32 accumulation): the GEMM of the
// dequantise-then-GEMM 4-bit path in the model's dtype.
void half_gemm(const void* x, const void* w, void* y, std::int64_t m, std::int64_t n, std::int64_t k, FloatType type,
               Stream stream = nullptr);

// cuBLASLt plans built so far in this process (descriptors, layouts, algorithm per shape): a
// repeated call with the same shape must not add one.
std::size_t cublaslt_plans_cached();

}  // namespace qeval::kernels::cuda
