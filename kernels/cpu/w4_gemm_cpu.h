// CPU backends of kernels/w4_gemm.h. Operands are already checked by the dispatch and are
// contiguous: x [M, K] f32, qweight [N, ceil(K/2)] u8, scales and zeros [N, G] f32, bias [N] f32
// or undefined. Results are [M, N] float32.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace qeval::kernels::cpu {

// Readable definition: y[m, n] = Σ_k x[m, k] · Ŵ[n, k] + bias[n], summed in k order.
at::Tensor w4_gemm_reference(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                             const at::Tensor& zeros, std::int64_t group_size, const at::Tensor& bias);

// Dequantises blocks of output channels on the fly and multiplies them with every row of x.
// allow_simd = false forces the portable loops (so tests cover both variants on one CPU); true runs
// the AVX-512 variant where the CPU has it, else the AVX2 + FMA one, else the portable loops.
at::Tensor w4_gemm_vectorized(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                              const at::Tensor& zeros, std::int64_t group_size, const at::Tensor& bias,
                              bool allow_simd = true);

// Ŵ as [N, K] float32. The reference composes ATen ops (unpack, expand groups, subtract,
// multiply); the vectorised one unpacks and dequantises row by row in parallel. Both evaluate
// (float(q) − z) · s, so they agree bit for bit.
at::Tensor w4_dequantize_reference(const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros,
                                   std::int64_t K, std::int64_t group_size);
at::Tensor w4_dequantize_vectorized(const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros,
                                    std::int64_t K, std::int64_t group_size, bool allow_simd = true);

// Whether w4_gemm_vectorized runs its AVX-512 variant on this CPU (checked once at run time), and
// which variant it runs: "avx512", "avx2" or "portable".
bool w4_gemm_avx512_available();
std::string w4_gemm_variant();

}  // namespace qeval::kernels::cpu
