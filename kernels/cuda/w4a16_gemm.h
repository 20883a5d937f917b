// W4A16 GEMM on the GPU: fp16 activations times packed 4-bit zero-point weights, dequantised on
// the fly, fp32 accumulation, fp16 output. Plain C++ header.
//
//   y[m, n] = Σ_k x[m, k] · Ŵ[n, k] + bias[n],   Ŵ[n, k] = (q[n, k] − z[n, k / g]) · s[n, k / g]
//
// Layouts (row-major, contiguous; the CPU quantiser's layout, DESIGN.md §5):
//   x:       [M, K] fp16 (IEEE binary16 as 2-byte elements, passed as void*)
//   qweight: [N, ceil(K / 2)] uint8, two 4-bit values per byte, low nibble = even k; when K is
//            odd the last byte's high nibble is padding and ignored
//   scales:  [N, G] f32, G = ceil(K / g); per channel is g = K, G = 1
//   zeros:   [N, G] f32, integer-valued, any range (a group that does not straddle zero has its
//            zero point outside [0, 15])
//   bias:    [N] f32 or nullptr
//   y:       [M, N] fp16
//
// Scales and zeros stay float32 on the GPU, as the CPU stores them, rather than fp16: fp16 holds
// integers exactly only up to 2048, so far-off zero points would change, and an fp16 scale would
// move every dequantised weight by up to 2⁻¹¹ relative, against the reference. The extra bytes
// are 8 per group instead of 4 (6% of the packed weights at g = 128, nothing per channel).
//
// Two kernels:
//   tensor_core  K and g multiples of 128, 16-byte aligned x and qweight. A block owns 16 output
//                channels; its 8 warps split K. Each thread streams 16 bytes (32 weights) of two
//                weight rows per step with 128-bit loads, turns nibbles into exact fp16 integers
//                q in registers, and mma.sync m16n8k16 (fp16 in, fp32 accumulate) forms Σ q·x over
//                128 k; the zero point and scale are applied per 128-k block in fp32 as
//                s · (Σ q·x − z · Σ x), exact in q − z for any z. M ≤ 8 uses one 8-token tile, larger
//                M tiles of 16 tokens (each tile re-reads the weights: for M well above 16 a
//                dequantise-then-fp16_gemm path is faster).
//   simple       any K, g, alignment: one warp per output channel, byte loads, Ŵ formed in fp32
//                exactly as the reference does. The correctness baseline and the fallback.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda {

struct W4A16Args {
  const void* x = nullptr;                // [M, K] fp16
  const std::uint8_t* qweight = nullptr;  // [N, ceil(K/2)] packed 4-bit
  const float* scales = nullptr;          // [N, G]
  const float* zeros = nullptr;           // [N, G]
  const float* bias = nullptr;            // [N] or nullptr
  void* y = nullptr;                      // [M, N] fp16
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t group_size = 0;            // g; K (or more) for per channel
};

enum class W4A16Kernel { automatic, tensor_core, simple };
std::string to_string(W4A16Kernel kernel);

// Empty when the tensor-core kernel accepts these arguments, otherwise why not.
std::string w4a16_tensor_core_unsupported_reason(const W4A16Args& args);

// automatic: tensor_core when supported, else simple. Throws CudaError on invalid arguments or
// when the requested kernel does not accept them.
void w4a16_gemm(const W4A16Args& args, W4A16Kernel kernel = W4A16Kernel::automatic, Stream stream = nullptr);

}  // namespace qeval::kernels::cuda
