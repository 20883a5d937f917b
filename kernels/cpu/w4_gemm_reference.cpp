// Reference 4-bit weight GEMM: each weight is unpacked from its nibble and dequantised as
// (q − zero) · scale right where it is used, then summed in k order. Slow and obvious: the
// definition the vectorised kernel and the dequantise-then-GEMM fallback are compared with;
// and the dequantisation of the packed layout as a composition of ATen ops.
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

at::Tensor w4_dequantize_reference(const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros,
                                   std::int64_t K, std::int64_t group_size) {
  at::Tensor group_of_k =
      at::div(at::arange(K, at::TensorOptions().dtype(at::kLong).device(qweight.device())), group_size, "floor")
          .to(at::kLong);  // LibTorch 1.13 can return float from a floor division by a Scalar
  at::Tensor s = scales.index_select(1, group_of_k);  // [N, K]
  at::Tensor z = zeros.index_select(1, group_of_k);   // [N, K]
  at::Tensor codes = at::stack({qweight & 0x0F, at::bitwise_right_shift(qweight, 4)}, 2).reshape({qweight.size(0), -1});
  return (codes.narrow(1, 0, K).to(at::kFloat) - z) * s;
}

}  // namespace qeval::kernels::cpu
