// CPU backends of kernels/int8_gemm.h. Operands are already checked by the dispatch:
// a [M, K] int8 and b [N, K] int8, both contiguous on the CPU; results are [M, N] float32
// holding the exact int32 sums Σ_k a[m, k] · b[n, k], each rounded once to float32.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace qeval::kernels::cpu {

// Readable reference: one int32 dot product per output (kernels/cpu/int8_gemm_reference.cpp).
at::Tensor int8_matmul_acc_reference(const at::Tensor& a, const at::Tensor& b);

// The same sums through LibTorch's float GEMMs (kernels/cpu/int8_gemm_float.cpp): every partial
// sum is an integer of magnitude ≤ 128² · K, which float32 holds exactly up to K = 1024 (2²⁴) and
// float64 beyond, so the result is exact in any summation order.
constexpr std::int64_t kMaxFloat32ExactK = 1024;
at::Tensor int8_matmul_acc_float(const at::Tensor& a, const at::Tensor& b);

// AVX2 kernel: both operands widened to int16 as they are packed, vpmaddwd into int32 in a 6-row ×
// 16-column register-blocked micro-kernel (kernels/cpu/int8_gemm_avx2.cpp); exact where oneDNN's
// int8 is not (no VNNI), for every int8 code, −128 included. Refuses to run where
// avx2_int8_gemm_available() is false.
at::Tensor int8_matmul_acc_avx2(const at::Tensor& a, const at::Tensor& b);
// The same with kernels/int8_gemm.h's scales and bias applied as each tile is stored (bit-identical
// to the dispatch's separate pass, which it saves): a_scale [M] or [1], b_scale [N] or [1], bias [N]
// or undefined, all contiguous float32.
at::Tensor int8_gemm_avx2(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                          const at::Tensor& b_scale, const at::Tensor& bias);
bool avx2_int8_gemm_available();

// oneDNN matmul s8 × s8 → f32 (s32 accumulation), primitives cached by shape (kernels/cpu/int8_gemm_onednn.cpp).
at::Tensor int8_matmul_acc_onednn(const at::Tensor& a, const at::Tensor& b);

// oneDNN's name for the implementation it uses at this shape ("brg:avx512_core_amx", ...).
std::string onednn_int8_impl(std::int64_t M, std::int64_t K, std::int64_t N);

// Whether oneDNN has a JIT int8 matmul on this CPU (checked once).
bool onednn_int8_jit();
// Whether that matmul also computes the exact sums: a self-test on operands whose adjacent
// products overflow 16 bits, against the reference (checked once). False without VNNI.
bool onednn_int8_exact();

}  // namespace qeval::kernels::cpu
