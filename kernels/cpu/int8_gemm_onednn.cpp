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

bool onednn_int8_jit() {
  // oneDNN always has a reference implementation ("ref:any"); only a JIT one is worth dispatching to.
  static const bool jit = [] {
    try {
      return primitive_for(16, 64, 16)->impl.rfind("ref", 0) != 0;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return jit;
}

bool onednn_int8_exact() {
  // Without VNNI, oneDNN multiplies s8 × s8 as (a + 128) u8 × b s8 with vpmaddubsw, which adds
  // adjacent products into a saturating int16: 255 · 127 · 2 does not fit. Operands at the int8
  // extremes (and a pseudo-random part, so that a sign pattern cannot hide it) expose that.
  static const bool exact = [] {
    if (!onednn_int8_jit()) return false;
    const std::int64_t M = 4, K = 96, N = 8;
    at::Tensor a = at::empty({M, K}, at::TensorOptions().dtype(at::kChar));
    at::Tensor b = at::empty({N, K}, at::TensorOptions().dtype(at::kChar));
    auto* pa = a.data_ptr<std::int8_t>();
    auto* pb = b.data_ptr<std::int8_t>();
    std::uint32_t state = 12345;
    auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      return static_cast<std::int8_t>(static_cast<int>(state >> 24) - 128);
    };
    for (std::int64_t i = 0; i < M * K; ++i) pa[i] = i < 2 * K ? (i < K ? 127 : -128) : next();
    for (std::int64_t i = 0; i < N * K; ++i) pb[i] = i < 2 * K ? (i < K ? 127 : -128) : next();
    return at::equal(int8_matmul_acc_onednn(a, b), int8_matmul_acc_reference(a, b));
  }();
  return exact;
}

}  // namespace qeval::kernels::cpu
