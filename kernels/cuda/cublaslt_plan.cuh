// Cached cuBLASLt plans for the row-major product y[M, N] = x[M, K] · w[N, K]ᵀ (the nn.Linear
// layout), shared by the int8 and fp16 GEMMs. Internal to kernels/cuda (needs CUDA headers).
//
// cuBLASLt is column-major. A row-major [R, C] matrix is a column-major [C, R] one with the same
// bytes, so the product is computed as yᵀ[N, M] = w · xᵀ with
//   A = w  as column-major [K, N], ld K, op T      (cuBLASLt m = N)
//   B = x  as column-major [K, M], ld K, op N      (cuBLASLt n = M)
//   C = y  as column-major [N, M], ld N            (cuBLASLt k = K)
// This "TN" form is the only one cuBLASLt's int8 IMMA kernels accept with the regular (non-COL32)
// data order, and on Hopper the COL32 / COL4_4R2_8C orders are not offered at all; IMMA then
// wants the leading dimensions K and N multiples of 4 and 4-byte aligned pointers.
//
// The descriptors, layouts and the heuristic's algorithm are built once per key (device, shape,
// types, pointer alignment) and reused; the workspace is one buffer per (device, stream).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda::detail {

struct LtGemmKey {
  int device = 0;
  std::int64_t m = 0, n = 0, k = 0;  // row-major sizes: x [m, k], w [n, k], y [m, n]
  cudaDataType_t ab_type = CUDA_R_8I;
  cudaDataType_t c_type = CUDA_R_32I;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32I;
  cudaDataType_t scale_type = CUDA_R_32I;
  // Largest power of two (≤ 256) dividing each base address: the heuristic assumes 256 unless
  // told, and an algorithm chosen for 256 may fault on a less aligned buffer.
  std::uint32_t align_x = 256, align_w = 256, align_y = 256;

  bool operator==(const LtGemmKey& o) const;
};

std::uint32_t pointer_alignment(const void* p);

// y = alpha · x · wᵀ + beta · y with the cached plan for `key` (built on first use).
// alpha and beta point to host values of key.scale_type.
void lt_matmul(const LtGemmKey& key, const void* alpha, const void* x, const void* w, const void* beta, void* y,
               Stream stream);

// Plans built so far (tests check that repeated calls do not build new ones).
std::size_t lt_plan_count();

}  // namespace qeval::kernels::cuda::detail
