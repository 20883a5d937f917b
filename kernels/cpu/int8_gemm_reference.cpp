// Reference int8 GEMM: acc[m, n] = Σ_k a[m, k] · b[n, k] summed in int32, then rounded once to
// float32: the definition every faster backend is tested against exactly. Written for clarity; rows are split across threads only so
// tests on realistic shapes stay quick.
#include <ATen/Parallel.h>

#include <cstdint>

#include "kernels/cpu/int8_gemm_cpu.h"

namespace qeval::kernels::cpu {

at::Tensor int8_matmul_acc_reference(const at::Tensor& a, const at::Tensor& b) {
  const std::int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  at::Tensor acc = at::empty({M, N}, at::TensorOptions().dtype(at::kFloat));  // [M, N]
  const std::int8_t* pa = a.data_ptr<std::int8_t>();
  const std::int8_t* pb = b.data_ptr<std::int8_t>();
  float* out = acc.data_ptr<float>();
  at::parallel_for(0, M, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t m = begin; m < end; ++m) {
      for (std::int64_t n = 0; n < N; ++n) {
        std::int32_t sum = 0;
        for (std::int64_t k = 0; k < K; ++k)
          sum += static_cast<std::int32_t>(pa[m * K + k]) * static_cast<std::int32_t>(pb[n * K + k]);
        out[m * N + n] = static_cast<float>(sum);
      }
    }
  });
  return acc;
}

}  // namespace qeval::kernels::cpu
