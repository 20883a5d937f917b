// int8 GEMM s8 × s8 → s32 through cuBLASLt IMMA (kernels/cuda/gemm_cublaslt.h).
// Limits (checked in limits.cpp): K and N multiples of 4 (IMMA with the regular data order),
// K ≤ kInt8GemmMaxK so the int32 sum is exact; and 4-byte aligned pointers. The result is exact;
// the scales are applied by the dequantising epilogue (int8_epilogue.cu), because cuBLASLt's int8
// kernels cannot write float16 with per-row activation scales.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/cublaslt_plan.cuh"
#include "kernels/cuda/gemm_cublaslt.h"

namespace qeval::kernels::cuda {

void int8_gemm_s32(const std::int8_t* a, const std::int8_t* b, std::int32_t* c, std::int64_t m, std::int64_t n,
                   std::int64_t k, Stream stream) {
  const std::string reason = int8_gemm_unsupported_reason(m, n, k);
  QEVAL_CUDA_EXPECT(reason.empty(), reason);
  detail::LtGemmKey key;
  key.m = m;
  key.n = n;
  key.k = k;
  key.ab_type = CUDA_R_8I;
  key.c_type = CUDA_R_32I;
  key.compute = CUBLAS_COMPUTE_32I;
  key.scale_type = CUDA_R_32I;
  key.align_x = detail::pointer_alignment(a);
  key.align_w = detail::pointer_alignment(b);
  key.align_y = detail::pointer_alignment(c);
  QEVAL_CUDA_EXPECT(key.align_x >= 4 && key.align_w >= 4 && key.align_y >= 4,
                    "int8_gemm_s32: cuBLASLt IMMA wants 4-byte aligned pointers, got alignments a " +
                        std::to_string(key.align_x) + ", b " + std::to_string(key.align_w) + ", c " +
                        std::to_string(key.align_y));
  QEVAL_CUDA_CHECK(cudaGetDevice(&key.device));
  const std::int32_t alpha = 1, beta = 0;
  detail::lt_matmul(key, &alpha, a, b, &beta, c, stream);
}

std::size_t cublaslt_plans_cached() { return detail::lt_plan_count(); }

}  // namespace qeval::kernels::cuda
