// Checks and dispatch for w4_gemm (declared in kernels/w4_gemm.h), and the layout helpers:
// packing codes two per byte and dequantising the packed form.
#include "kernels/w4_gemm.h"

#include <c10/util/Exception.h>

#include <string>

#include "kernels/cpu/w4_gemm_cpu.h"
#include "kernels/fp32_gemm.h"

namespace qeval::kernels {
namespace {

// Above this many rows the GEMM is compute-bound: dequantising once and handing the float
// weights to BLAS beats unpacking per tile (bench/gemm_bench.cpp measures the crossover).
constexpr std::int64_t kMaxOnTheFlyRows = 16;

void check_layout(const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros, std::int64_t K,
                  std::int64_t group_size, const char* op) {
  TORCH_CHECK(qweight.defined() && qweight.scalar_type() == at::kByte && qweight.dim() == 2, op,
              ": qweight must be uint8 [N, ceil(K/2)]");
  TORCH_CHECK(K >= 1, op, ": K must be at least 1, got ", K);
  TORCH_CHECK(qweight.size(1) == (K + 1) / 2, op, ": qweight has ", qweight.size(1), " bytes per row, K = ", K,
              " needs ", (K + 1) / 2);
  TORCH_CHECK(group_size >= 1 && group_size <= K, op, ": group_size must be in [1, K = ", K, "], got ", group_size);
  const std::int64_t N = qweight.size(0), G = (K + group_size - 1) / group_size;
  for (const auto* t : {&scales, &zeros}) {
    const char* name = t == &scales ? "scales" : "zeros";
    TORCH_CHECK(t->defined() && t->scalar_type() == at::kFloat && t->dim() == 2 && t->size(0) == N &&
                    t->size(1) == G,
                op, ": ", name, " must be float32 [N = ", N, ", G = ", G, "] for K = ", K, " and group_size ",
                group_size, ", got ", t->defined() ? t->sizes() : at::IntArrayRef{});
  }
  TORCH_CHECK(qweight.device() == scales.device() && qweight.device() == zeros.device(), op,
              ": qweight, scales and zeros must be on one device");
}

// Odd K: the high nibble of each row's last byte is padding and must be 0 (N bytes to read).
void check_padding(const at::Tensor& packed, std::int64_t K, const char* op) {
  if (K % 2 == 1 && packed.size(0) > 0)
    TORCH_CHECK(at::bitwise_right_shift(packed.select(1, packed.size(1) - 1), 4).eq(0).all().item<bool>(), op,
                ": odd K = ", K, " but a row's padding nibble (high nibble of its last byte) is not 0");
}

}  // namespace

std::string to_string(W4GemmBackend backend) {
  switch (backend) {
    case W4GemmBackend::automatic: return "automatic";
    case W4GemmBackend::reference: return "reference";
    case W4GemmBackend::vectorized: return "vectorized";
    case W4GemmBackend::dequantize_fallback: return "dequantize_fallback";
  }
  return "unknown";
}

W4GemmBackend parse_w4_gemm_backend(const std::string& name) {
  for (auto b : {W4GemmBackend::automatic, W4GemmBackend::reference, W4GemmBackend::vectorized,
                 W4GemmBackend::dequantize_fallback})
    if (to_string(b) == name) return b;
  TORCH_CHECK(false, "w4_gemm: unknown backend '", name, "'; valid: automatic, reference, vectorized, dequantize_fallback");
}

bool w4_gemm_uses_avx512() { return cpu::w4_gemm_avx512_available(); }

std::string w4_gemm_variant() { return cpu::w4_gemm_variant(); }

W4GemmBackend w4_gemm_backend_for(std::int64_t M, std::int64_t K, std::int64_t N) {
  return M <= kMaxOnTheFlyRows ? W4GemmBackend::vectorized : W4GemmBackend::dequantize_fallback;
}

at::Tensor pack_u4(const at::Tensor& codes) {
  TORCH_CHECK(codes.defined() && codes.scalar_type() == at::kByte && codes.dim() == 2,
              "pack_u4: codes must be uint8 [N, K]");
  TORCH_CHECK(codes.numel() == 0 || codes.max().item<int>() <= 15, "pack_u4: codes must lie in [0, 15], found ",
              codes.max().item<int>());
  const std::int64_t N = codes.size(0), K = codes.size(1);
  at::Tensor even = K % 2 == 0 ? codes : at::cat({codes, at::zeros({N, 1}, codes.options())}, 1);  // [N, 2·Kb]
  at::Tensor pairs = even.reshape({N, -1, 2});
  return (pairs.select(2, 0) | at::bitwise_left_shift(pairs.select(2, 1), 4)).contiguous();  // [N, Kb]
}

at::Tensor unpack_u4(const at::Tensor& packed, std::int64_t K) {
  TORCH_CHECK(packed.defined() && packed.scalar_type() == at::kByte && packed.dim() == 2,
              "unpack_u4: packed must be uint8 [N, ceil(K/2)]");
  TORCH_CHECK(K >= 0 && packed.size(1) == (K + 1) / 2, "unpack_u4: ", packed.size(1), " bytes per row cannot hold K = ",
              K, " codes (needs ", (K + 1) / 2, ")");
  const std::int64_t N = packed.size(0);
  check_padding(packed, K, "unpack_u4");
  at::Tensor codes = at::stack({packed & 0x0F, at::bitwise_right_shift(packed, 4)}, 2).reshape({N, -1});  // [N, 2·Kb]
  return codes.narrow(1, 0, K).contiguous();
}

at::Tensor w4_dequantize(const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros, std::int64_t K,
                         std::int64_t group_size) {
  check_layout(qweight, scales, zeros, K, group_size, "w4_dequantize");
  if (!qweight.is_cpu()) return cpu::w4_dequantize_reference(qweight, scales, zeros, K, group_size);  // any device
  check_padding(qweight, K, "w4_dequantize");
  return cpu::w4_dequantize_vectorized(qweight.contiguous(), scales.contiguous(), zeros.contiguous(), K, group_size);
}

at::Tensor w4_gemm(const at::Tensor& x_in, const at::Tensor& qweight, const at::Tensor& scales_in,
                   const at::Tensor& zeros_in, std::int64_t group_size, const at::Tensor& bias,
                   W4GemmBackend backend) {
  TORCH_CHECK(x_in.defined() && x_in.scalar_type() == at::kFloat && x_in.dim() == 2, "w4_gemm: x must be float32 [M, K]");
  const std::int64_t M = x_in.size(0), K = x_in.size(1);
  check_layout(qweight, scales_in, zeros_in, K, group_size, "w4_gemm");
  const std::int64_t N = qweight.size(0);
  TORCH_CHECK(!bias.defined() || (bias.scalar_type() == at::kFloat && bias.dim() == 1 && bias.size(0) == N),
              "w4_gemm: bias must be float32 [", N, "]");
  TORCH_CHECK(x_in.device() == qweight.device(), "w4_gemm: x on ", x_in.device(), ", weights on ", qweight.device());
  // CUDA backends (kernels/cuda/) hook in here; until then a CUDA operand is refused, never copied.
  TORCH_CHECK(x_in.is_cpu(), "w4_gemm: no backend for device ", x_in.device(), " in this build");
  if (backend == W4GemmBackend::automatic) backend = w4_gemm_backend_for(M, K, N);
  if (backend == W4GemmBackend::dequantize_fallback) {
    at::Tensor w = w4_dequantize(qweight, scales_in, zeros_in, K, group_size);  // [N, K]
    return fp32_linear(x_in.contiguous(), w.contiguous(), bias.defined() ? bias.contiguous() : bias);
  }
  at::Tensor x = x_in.contiguous(), q = qweight.contiguous(), s = scales_in.contiguous(), z = zeros_in.contiguous();
  at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  switch (backend) {
    case W4GemmBackend::reference: return cpu::w4_gemm_reference(x, q, s, z, group_size, b);
    case W4GemmBackend::vectorized: return cpu::w4_gemm_vectorized(x, q, s, z, group_size, b);
    default: break;
  }
  TORCH_CHECK(false, "w4_gemm: unhandled backend ", to_string(backend));
}

}  // namespace qeval::kernels
