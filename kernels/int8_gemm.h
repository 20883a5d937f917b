// int8 GEMM: y = (a · bᵀ accumulated exactly in int32) * a_scale ⊗ b_scale + bias, in float32.
// The operation the int8 absmax schemes compute on (DESIGN.md §5, §7). One entry point; the
// dispatch in int8_gemm.cpp picks a backend by device and shape and can always fall back to
// dequantise-then-float-GEMM. No build flags in this header: CUDA backends hook into the dispatch.
//
// Layouts (row-major, contiguous):
//   a:       [M, K] int8     quantised activations, one token per row
//   b:       [N, K] int8     quantised weights, one output channel per row (nn.Linear layout)
//   a_scale: [M] or [1] f32  per-token (or per-row-group) scales, or one per-tensor scale
//   b_scale: [N] or [1] f32  per-channel scales, or one per-tensor scale
//   bias:    [N] f32 or undefined
//   result:  [M, N] f32,  y[m, n] = (float(acc[m, n]) * a_scale[m]) * b_scale[n] + bias[n],
//            every operation rounded to float32 on its own (no fused multiply-add)
// acc[m, n] = Σ_k a[m, k] · b[n, k] is exact in int32 for K ≤ 133,143 (127² · K < 2³¹; larger K
// is refused) and float() rounds it once to nearest float32. oneDNN hands its int32 accumulator
// out through float32 even for an s32 destination (off by one above 2²⁴), so float32 acc is the
// exact contract every integer backend meets bit for bit.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace qeval::kernels {

enum class Int8GemmBackend {
  automatic,            // the dispatch chooses (see int8_gemm_backend_for)
  reference,            // readable triple loop, s8 × s8 → s32 (kernels/cpu/int8_gemm_reference.cpp)
  onednn,               // oneDNN matmul s8 × s8 → s32 (kernels/cpu/int8_gemm_onednn.cpp)
  avx2,                 // operands widened to int16, vpmaddwd into int32 in a register-blocked
                        // micro-kernel: exact where oneDNN's int8 is not (AVX2 and AVX-512 CPUs
                        // without VNNI; kernels/cpu/int8_gemm_avx2.cpp)
  float_exact,          // the exact sums through a float GEMM, float32 for K ≤ 1024, float64 beyond
                        // (every partial sum is an integer the float holds exactly, so exact in any
                        // order; kernels/cpu/int8_gemm_float.cpp): where oneDNN's int8 is not exact
  dequantize_fallback,  // dequantise both operands to float, then at::matmul (not exact in int32)
};

std::string to_string(Int8GemmBackend backend);
Int8GemmBackend parse_int8_gemm_backend(const std::string& name);  // throws listing the valid names

// The scaled product above, as [M, N] float32.
at::Tensor int8_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale, const at::Tensor& b_scale,
                     const at::Tensor& bias = at::Tensor(), Int8GemmBackend backend = Int8GemmBackend::automatic);

// The unscaled products float(acc) as [M, N] float32: what integer backends agree on exactly.
// dequantize_fallback is not an integer backend and is refused here.
at::Tensor int8_matmul_acc(const at::Tensor& a, const at::Tensor& b,
                           Int8GemmBackend backend = Int8GemmBackend::automatic);

// What `automatic` resolves to for these operands (callers record it).
Int8GemmBackend int8_gemm_backend_for(const at::Tensor& a, const at::Tensor& b);
// What `automatic` resolves to for CPU operands on this machine: onednn when oneDNN has a JIT
// int8 matmul for this CPU that computes the exact sums (VNNI, AMX), else avx2 where the CPU has
// AVX2 (CPUID at run time), else float_exact. (Without VNNI, oneDNN multiplies with vpmaddubsw,
// whose 16-bit pair sums saturate: on an AVX2 EPYC it returned -540,673 for a sum of -66,096,768.
// A self-test on worst-case operands decides, once.)
Int8GemmBackend int8_gemm_cpu_backend();

}  // namespace qeval::kernels
