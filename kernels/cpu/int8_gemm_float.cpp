// The exact int8 sums through LibTorch's float GEMMs, for CPUs where oneDNN's int8 matmul is not
// exact (no VNNI). Every product a·b is an integer of magnitude ≤ 128² = 2¹⁴, and every partial
// sum on the way, in whatever order (or with whatever fused multiply-adds) the BLAS adds, is an
// integer of magnitude ≤ 2¹⁴ · K. A float holds such integers exactly while they fit its
// significand, so:
//   K ≤ 1024:  float32 (2¹⁴ · 1024 = 2²⁴): the sum comes out exact, already in float32;
//   larger K:  float64 (2¹⁴ · 133,143 < 2⁵³); its one conversion to float32 rounds to nearest,
//              as the reference's int32 → float32 cast does.
// Either way bit-identical to the reference. float32 runs twice the lanes of float64 per
// instruction and converts half the bytes, so the model shapes that fit (d_model and d_ff up to
// 1024: every linear of stories260K and the d-256 study models) take it.
#include "kernels/cpu/int8_gemm_cpu.h"

namespace qeval::kernels::cpu {

at::Tensor int8_matmul_acc_float(const at::Tensor& a, const at::Tensor& b) {
  if (a.size(1) <= kMaxFloat32ExactK) return at::matmul(a.to(at::kFloat), b.to(at::kFloat).t());
  return at::matmul(a.to(at::kDouble), b.to(at::kDouble).t()).to(at::kFloat);
}

}  // namespace qeval::kernels::cpu
