// Reference 4-bit weight GEMM: each weight is unpacked from its nibble and dequantised as
// (q − zero) · scale right where it is used, then summed in k order. Slow and obvious: the
// definition the vectorised kernel and the dequantise-then-GEMM fallback are compared with.
#include <ATen/Parallel.h>

#include <cstdint>

#include "kernels/cpu/w4_gemm_cpu.h"

namespace qeval::kernels::cpu {

at::Tensor w4_gemm_reference(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                             const at::Tensor& zeros, std::int64_t group_size, const at::Tensor& bias) {
  const std::int64_t M = x.size(0), K = x.size(1), N = qweight.size(0);
  const std::int64_t Kb = qweight.size(1), G = scales.size(1);
  at::Tensor y = at::empty({M, N}, x.options());  // [M, N]
  const float* px = x.data_ptr<float>();
  const std::uint8_t* pq = qweight.data_ptr<std::uint8_t>();
  const float* ps = scales.data_ptr<float>();
  const float* pz = zeros.data_ptr<float>();
  const float* pb = bias.defined() ? bias.data_ptr<float>() : nullptr;
  float* py = y.data_ptr<float>();
  at::parallel_for(0, N, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n) {
      for (std::int64_t m = 0; m < M; ++m) {
        float sum = 0.0f;
        for (std::int64_t k = 0; k < K; ++k) {
          const std::uint8_t byte = pq[n * Kb + k / 2];
          const int code = (k % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
          const std::int64_t g = k / group_size;
          const float w = (static_cast<float>(code) - pz[n * G + g]) * ps[n * G + g];
          sum += px[m * K + k] * w;
        }
        py[m * N + n] = pb ? sum + pb[n] : sum;
      }
    }
  });
  return y;
}

}  // namespace qeval::kernels::cpu
