// int8 GEMM through oneDNN's matmul primitive: a [M, K] s8 × b [N, K] s8 → [M, N] f32, the
// int32 accumulator rounded once to float32 (oneDNN converts through f32 in any case).
// b is handed to oneDNN as a [K, N] matrix in `ba` order (its nn.Linear rows are the columns),
// so no copy is made. oneDNN picks its fastest implementation for the CPU (AMX-int8 or
// AVX-512 VNNI brgemm on Sapphire Rapids); building a primitive costs far more than a small
// GEMM, so primitives are cached by shape (kernels/cpu/onednn_matmul.h).
#include <string>

#include "kernels/cpu/int8_gemm_cpu.h"
#include "kernels/cpu/onednn_matmul.h"

namespace qeval::kernels::cpu {
namespace {

using dt = dnnl::memory::data_type;

std::shared_ptr<const OnednnMatmul> primitive_for(std::int64_t M, std::int64_t K, std::int64_t N) {
  return onednn_matmul(dt::s8, dt::s8, M, K, N, /*with_bias=*/false);
}

}  // namespace

at::Tensor int8_matmul_acc_onednn(const at::Tensor& a, const at::Tensor& b) {
  const std::int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  at::Tensor acc = at::empty({M, N}, at::TensorOptions().dtype(at::kFloat));  // [M, N]
  if (M == 0 || N == 0) return acc;
  if (K == 0) return acc.zero_();
  run_onednn_matmul(*primitive_for(M, K, N), a.data_ptr(), b.data_ptr(), nullptr, acc.data_ptr());
  return acc;
}

std::string onednn_int8_impl(std::int64_t M, std::int64_t K, std::int64_t N) { return primitive_for(M, K, N)->impl; }

bool onednn_int8_available() {
  // oneDNN always has a reference implementation ("ref:any"); only a JIT one is worth dispatching to.
  static const bool available = [] {
    try {
      return primitive_for(16, 64, 16)->impl.rfind("ref", 0) != 0;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

}  // namespace qeval::kernels::cpu
