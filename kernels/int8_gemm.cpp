// Checks and dispatch for int8_gemm (declared in kernels/int8_gemm.h). The backends compute the
// exact int32 products (handed over as float32); the scales and bias are applied here, in one
// place, in the order the header states, so every integer backend gives bit-identical results.
#include "kernels/int8_gemm.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>

#include "kernels/cpu/int8_gemm_cpu.h"

namespace qeval::kernels {
namespace {

constexpr std::int64_t kMaxExactK = 133143;  // 127 · 127 · K < 2³¹

void check_operands(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.defined() && b.defined(), "int8_gemm: operands must be defined");
  TORCH_CHECK(a.scalar_type() == at::kChar && b.scalar_type() == at::kChar, "int8_gemm: expected int8 operands, got a ",
              a.scalar_type(), " and b ", b.scalar_type());
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "int8_gemm: expected a [M, K] and b [N, K], got a with ", a.dim(),
              " dims and b with ", b.dim());
  TORCH_CHECK(a.size(1) == b.size(1), "int8_gemm: K mismatch, a has ", a.size(1), ", b has ", b.size(1));
  TORCH_CHECK(a.size(1) <= kMaxExactK, "int8_gemm: K = ", a.size(1), " could overflow the int32 accumulator (limit ",
              kMaxExactK, ")");
  TORCH_CHECK(a.device() == b.device(), "int8_gemm: operands on different devices, a on ", a.device(), ", b on ",
              b.device());
  // CUDA backends (kernels/cuda/) hook in here; until then a CUDA operand is refused, never copied.
  TORCH_CHECK(a.is_cpu(), "int8_gemm: no backend for device ", a.device(), " in this build");
}

void check_scale(const at::Tensor& s, std::int64_t n, const char* name, const char* what) {
  TORCH_CHECK(s.defined() && s.scalar_type() == at::kFloat && s.dim() == 1 && (s.size(0) == n || s.size(0) == 1),
              "int8_gemm: ", name, " must be float32 [", n, "] (", what, ") or [1] (per tensor), got ",
              s.defined() ? std::string(c10::toString(s.scalar_type())) : std::string("undefined"), " ",
              s.defined() ? s.sizes() : at::IntArrayRef{});
}

// y[m, n] = (acc[m, n] * a_scale[m]) * b_scale[n] + bias[n], acc already float(Σ a·b), computed
// in place in acc. Each operation is rounded on its own: contracting the last multiply and add
// into an FMA (GCC's default when the target has FMA) would change the bits other backends must
// match. The loops are branch-free so they vectorise; target_clones adds an AVX-512 copy chosen
// at load time on CPUs that have it. Clang has no optimize attribute: its builds compile with
// -ffp-contract=off (CMakeLists.txt).
#if defined(__clang__)
#define QEVAL_NO_FP_CONTRACT
#else
#define QEVAL_NO_FP_CONTRACT optimize("fp-contract=off"),
#endif
__attribute__((QEVAL_NO_FP_CONTRACT target_clones("avx512f", "default"))) void scale_rows(
    float* acc, std::int64_t M, std::int64_t N, const float* a_scale, bool a_each, const float* b_scale, bool b_each,
    const float* bias, std::int64_t m_begin, std::int64_t m_end) {
  for (std::int64_t m = m_begin; m < m_end; ++m) {
    float* row = acc + m * N;
    const float ra = a_scale[a_each ? m : 0];
    if (b_each) {
      for (std::int64_t n = 0; n < N; ++n) row[n] = (row[n] * ra) * b_scale[n];
    } else {
      const float rb = b_scale[0];
      for (std::int64_t n = 0; n < N; ++n) row[n] = (row[n] * ra) * rb;
    }
    if (bias != nullptr)
      for (std::int64_t n = 0; n < N; ++n) row[n] = row[n] + bias[n];
  }
}

at::Tensor apply_scales(at::Tensor acc, const at::Tensor& a_scale, const at::Tensor& b_scale, const at::Tensor& bias) {
  const std::int64_t M = acc.size(0), N = acc.size(1);
  at::Tensor sa = a_scale.contiguous(), sb = b_scale.contiguous();
  at::Tensor bb = bias.defined() ? bias.contiguous() : bias;
  float* pacc = acc.data_ptr<float>();
  const float* psa = sa.data_ptr<float>();
  const float* psb = sb.data_ptr<float>();
  const float* pbias = bb.defined() ? bb.data_ptr<float>() : nullptr;
  at::parallel_for(0, M, 16, [&](std::int64_t begin, std::int64_t end) {
    scale_rows(pacc, M, N, psa, sa.numel() != 1, psb, sb.numel() != 1, pbias, begin, end);
  });
  return acc;
}

}  // namespace

std::string to_string(Int8GemmBackend backend) {
  switch (backend) {
    case Int8GemmBackend::automatic: return "automatic";
    case Int8GemmBackend::reference: return "reference";
    case Int8GemmBackend::onednn: return "onednn";
    case Int8GemmBackend::avx2: return "avx2";
    case Int8GemmBackend::float_exact: return "float_exact";
    case Int8GemmBackend::dequantize_fallback: return "dequantize_fallback";
  }
  return "unknown";
}

Int8GemmBackend parse_int8_gemm_backend(const std::string& name) {
  for (auto b : {Int8GemmBackend::automatic, Int8GemmBackend::reference, Int8GemmBackend::onednn,
                 Int8GemmBackend::avx2, Int8GemmBackend::float_exact, Int8GemmBackend::dequantize_fallback})
    if (to_string(b) == name) return b;
  TORCH_CHECK(false, "int8_gemm: unknown backend '", name,
              "'; valid: automatic, reference, onednn, avx2, float_exact, dequantize_fallback");
}

Int8GemmBackend int8_gemm_cpu_backend() {
  if (cpu::onednn_int8_exact()) return Int8GemmBackend::onednn;
  return cpu::avx2_int8_gemm_available() ? Int8GemmBackend::avx2 : Int8GemmBackend::float_exact;
}

Int8GemmBackend int8_gemm_backend_for(const at::Tensor& a, const at::Tensor& b) {
  check_operands(a, b);
  return int8_gemm_cpu_backend();
}

at::Tensor int8_matmul_acc(const at::Tensor& a_in, const at::Tensor& b_in, Int8GemmBackend backend) {
  check_operands(a_in, b_in);
  if (backend == Int8GemmBackend::automatic) backend = int8_gemm_cpu_backend();
  at::Tensor a = a_in.contiguous(), b = b_in.contiguous();
  switch (backend) {
    case Int8GemmBackend::reference: return cpu::int8_matmul_acc_reference(a, b);
    case Int8GemmBackend::float_exact: return cpu::int8_matmul_acc_float(a, b);
    case Int8GemmBackend::avx2: return cpu::int8_matmul_acc_avx2(a, b);  // refuses without AVX2
    case Int8GemmBackend::onednn:
      // Forcing it where the self-test failed is allowed (it is how the failure is shown).
      TORCH_CHECK(cpu::onednn_int8_jit(), "int8_matmul_acc: oneDNN has no JIT int8 matmul for this CPU");
      return cpu::int8_matmul_acc_onednn(a, b);
    default: break;
  }
  TORCH_CHECK(false, "int8_matmul_acc: backend ", to_string(backend), " does not compute integer products");
}

at::Tensor int8_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale, const at::Tensor& b_scale,
                     const at::Tensor& bias, Int8GemmBackend backend) {
  check_operands(a, b);
  const std::int64_t M = a.size(0), N = b.size(0);
  check_scale(a_scale, M, "a_scale", "per row");
  check_scale(b_scale, N, "b_scale", "per output channel");
  TORCH_CHECK(!bias.defined() || (bias.scalar_type() == at::kFloat && bias.dim() == 1 && bias.size(0) == N),
              "int8_gemm: bias must be float32 [", N, "]");
  if (backend == Int8GemmBackend::automatic) backend = int8_gemm_backend_for(a, b);
  if (backend == Int8GemmBackend::dequantize_fallback) {
    // Same scale order as apply_scales, but the sum runs in float: equal to float rounding only.
    at::Tensor a_deq = a.to(at::kFloat) * (a_scale.numel() == 1 ? a_scale : a_scale.unsqueeze(1));  // [M, K]
    at::Tensor b_deq = b.to(at::kFloat) * (b_scale.numel() == 1 ? b_scale : b_scale.unsqueeze(1));  // [N, K]
    return bias.defined() ? at::linear(a_deq, b_deq, bias) : at::linear(a_deq, b_deq);
  }
  if (backend == Int8GemmBackend::avx2)  // applies the scales as it stores (the same bits, one pass fewer)
    return cpu::int8_gemm_avx2(a.contiguous(), b.contiguous(), a_scale.contiguous(), b_scale.contiguous(),
                               bias.defined() ? bias.contiguous() : bias);
  return apply_scales(int8_matmul_acc(a, b, backend), a_scale, b_scale, bias);
}

}  // namespace qeval::kernels
