// fp16 / bf16 GEMM with fp32 accumulation through cuBLASLt (kernels/cuda/gemm_cublaslt.h): the
// baseline every GPU benchmark ratio is taken against, and the float GEMM of the
// dequantise-then-GEMM fallbacks. Same cached-plan machinery and layout as the int8 GEMM.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/cublaslt_plan.cuh"
#include "kernels/cuda/gemm_cublaslt.h"

namespace qeval::kernels::cuda {

void fp16_gemm(const void* x, const void* w, void* y, std::int64_t m, std::int64_t n, std::int64_t k, Stream stream) {
  half_gemm(x, w, y, m, n, k, FloatType::f16, stream);
}

void half_gemm(const void* x, const void* w, void* y, std::int64_t m, std::int64_t n, std::int64_t k, FloatType type,
               Stream stream) {
  QEVAL_CUDA_EXPECT(m > 0 && n > 0 && k > 0, "fp16_gemm: sizes must be positive, got M " + std::to_string(m) + ", N " +
                                                 std::to_string(n) + ", K " + std::to_string(k));
  QEVAL_CUDA_EXPECT(type != FloatType::f32, "half_gemm: f16 or bf16 only");
  const cudaDataType_t t = type == FloatType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  detail::LtGemmKey key;
  key.m = m;
  key.n = n;
  key.k = k;
  key.ab_type = t;
  key.c_type = t;
  key.compute = CUBLAS_COMPUTE_32F;
  key.scale_type = CUDA_R_32F;
  key.align_x = detail::pointer_alignment(x);
  key.align_w = detail::pointer_alignment(w);
  key.align_y = detail::pointer_alignment(y);
  QEVAL_CUDA_CHECK(cudaGetDevice(&key.device));
  const float alpha = 1.0f, beta = 0.0f;
  detail::lt_matmul(key, &alpha, x, w, &beta, y, stream);
}

}  // namespace qeval::kernels::cuda
