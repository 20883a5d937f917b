// The exact int8 sums through LibTorch's float64 GEMM: |Σ_k a·b| ≤ 127² · K < 2³¹, and every
// partial sum on the way is an integer of at most that size, which float64 (53-bit significand)
// holds exactly, so the result is exact in whatever order the BLAS adds. The one conversion to
// float32 rounds to nearest, as the reference's int32 → float32 cast does: bit-identical to it.
// The automatic backend where oneDNN's int8 matmul is not exact (CPUs without VNNI).
#include "kernels/cpu/int8_gemm_cpu.h"

namespace qeval::kernels::cpu {

at::Tensor int8_matmul_acc_float64(const at::Tensor& a, const at::Tensor& b) {
  return at::matmul(a.to(at::kDouble), b.to(at::kDouble).t()).to(at::kFloat);
}

}  // namespace qeval::kernels::cpu
