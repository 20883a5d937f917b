// Dequantisation of packed 4-bit zero-point weights on the GPU, for the dequantise-then-GEMM
// path of 4-bit linears at evaluation batch sizes (kernels/cuda/adapter_torch.h w4_linear_cuda).
// Plain C++ header.
//
//   Ŵ[n, k] = (float(q[n, k]) − zeros[n, g]) · scales[n, g],  g = k / group_size
//
// in float32 with each operation rounded on its own (the CPU reference's order), then rounded to
// the output type (nearest even). Layout as kernels/cuda/w4a16_gemm.h: qweight [N, ceil(K/2)]
// uint8, low nibble = even k; scales, zeros [N, ceil(K / group_size)] float32; out [N, K].
//
// Why: at M ≥ 512 tokens a GEMM is compute-bound, and cuBLAS's fp16 tensor-core GEMM on Ŵ beats
// a kernel that re-dequantises every weight tile for every 16 tokens. The weights are dequantised
// once per layer (the adapter caches Ŵ) or once per call (then the cost is one pass over N·K).
#pragma once

#include <cstdint>

#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda {

// The 4-bit linear's dispatch (kernels/cuda/adapter_torch.cpp w4_linear_cuda, and the benchmark):
// at most this many tokens go to the W4A16 kernel (fp16 activations, shapes its tensor-core kernel
// takes); more go to dequantise + cuBLASLt GEMM. On the H200 (../shared/gpu/2026-11-26-h200/) the
// tensor-core W4A16 kernel ran at 1.3–1.5× cuBLAS fp16 for M = 1 and 4 and at 0.83–1.00× for
// M = 16, where the dequantised path with Ŵ cached is exactly an fp16 GEMM (1.0×).
constexpr std::int64_t kW4KernelMaxM = 8;

void w4_dequantize(const std::uint8_t* qweight, const float* scales, const float* zeros, std::int64_t n,
                   std::int64_t k, std::int64_t group_size, void* out, FloatType out_type, Stream stream = nullptr);

}  // namespace qeval::kernels::cuda
