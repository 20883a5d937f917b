// 4-bit weight GEMM: y = x · Ŵᵀ + bias in float32, with the weights stored packed as unsigned
// 4-bit codes plus a float scale and zero per (output channel, group of input channels)
// (DESIGN.md §5 "4-bit zero-point", §7). The dispatch in w4_gemm.cpp picks a backend by device
// and shape and can always fall back to dequantise-then-float-GEMM. No build flags here.
//
// Layouts (row-major, contiguous):
//   x:        [M, K] float32
//   qweight:  [N, ceil(K/2)] uint8   two codes per byte: low nibble = even k, high nibble = odd k;
//                                    for odd K the last byte's high nibble is padding and is 0
//   scales:   [N, G] float32         G = ceil(K / group_size)
//   zeros:    [N, G] float32         integral values; may lie outside [0, 15] (an all-positive or
//                                    all-negative group has its zero point outside the code range)
//   group_size: 1 ≤ group_size ≤ K;  group g covers k ∈ [g·group_size, min(K, (g+1)·group_size));
//                                    per output channel means group_size = K, G = 1
//   bias:     [N] float32 or undefined
//   result:   [M, N] float32
// Dequantised weight: Ŵ[n, k] = (float(q[n, k]) − zeros[n, g]) · scales[n, g], g = k / group_size,
// evaluated in float32 exactly so (one subtraction of small integers, one multiply), so every
// backend sees bit-identical weights; only the order of the K-sum differs between backends.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace qeval::kernels {

enum class W4GemmBackend {
  automatic,            // the dispatch chooses (see w4_gemm_backend_for)
  reference,            // readable loop over the packed codes (kernels/cpu/w4_gemm_reference.cpp)
  vectorized,           // dequantises on the fly, AVX-512 or AVX2 when the CPU has it (kernels/cpu/w4_gemm_vectorized.cpp)
  dequantize_fallback,  // w4_dequantize, then at::matmul
};

std::string to_string(W4GemmBackend backend);
W4GemmBackend parse_w4_gemm_backend(const std::string& name);  // throws listing the valid names

at::Tensor w4_gemm(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros,
                   std::int64_t group_size, const at::Tensor& bias = at::Tensor(),
                   W4GemmBackend backend = W4GemmBackend::automatic);

// What `automatic` resolves to for an [M, K] input (callers record it). Small M is memory-bound
// and runs the on-the-fly kernel; large M is compute-bound and dequantises once for BLAS.
W4GemmBackend w4_gemm_backend_for(std::int64_t M, std::int64_t K, std::int64_t N);

// Ŵ as [N, K] float32 from the packed layout above.
at::Tensor w4_dequantize(const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros, std::int64_t K,
                         std::int64_t group_size);

// Codes [N, K] uint8 in [0, 15] → [N, ceil(K/2)] uint8 in the layout above, and back.
at::Tensor pack_u4(const at::Tensor& codes);
at::Tensor unpack_u4(const at::Tensor& packed, std::int64_t K);

// Whether this CPU runs the AVX-512 variant of the vectorised kernel, and which variant it runs:
// "avx512", "avx2" (AVX2 + FMA) or "portable".
bool w4_gemm_uses_avx512();
std::string w4_gemm_variant();

}  // namespace qeval::kernels
