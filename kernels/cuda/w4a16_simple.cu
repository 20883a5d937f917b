// The simple W4A16 kernel (kernels/cuda/w4a16_gemm.h): any K, group size and alignment.
// One warp per output channel; lanes take consecutive bytes of the packed row, form each weight
// as the reference does, Ŵ = (q − z) · s in fp32 (__fsub_rn / __fmul_rn: no contraction), and
// accumulate up to 8 tokens in fp32; a warp shuffle sums the lanes. Tokens beyond 8 take further
// passes over the row (from L2). Correct everywhere, fast nowhere: the tensor-core kernel is the
// fast path.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/w4a16_launch.cuh"

namespace qeval::kernels::cuda::detail {
namespace {

constexpr int kWarps = 4;   // output channels per block
constexpr int kTokens = 8;  // tokens per pass over a weight row

__global__ void __launch_bounds__(kWarps * 32)
    w4a16_simple_kernel(const __half* __restrict__ x, const std::uint8_t* __restrict__ qweight,
                        const float* __restrict__ scales, const float* __restrict__ zeros,
                        const float* __restrict__ bias, __half* __restrict__ y, std::int64_t M, std::int64_t N,
                        std::int64_t K, std::int64_t group_size) {
  const int lane = threadIdx.x & 31;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= N) return;  // no block-wide barrier below
  const std::int64_t row_bytes = (K + 1) / 2, groups = (K + group_size - 1) / group_size;
  const std::uint8_t* w = qweight + row * row_bytes;
  const float* s = scales + row * groups;
  const float* z = zeros + row * groups;
  for (std::int64_t m0 = 0; m0 < M; m0 += kTokens) {
    const int tokens = static_cast<int>(M - m0 < kTokens ? M - m0 : kTokens);
    float acc[kTokens] = {};
    for (std::int64_t b = lane; b < row_bytes; b += 32) {
      const unsigned byte = w[b];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t k = 2 * b + h;
        if (k >= K) break;
        const std::int64_t g = k / group_size;
        const float wk = __fmul_rn(__fsub_rn(static_cast<float>((byte >> (4 * h)) & 15u), z[g]), s[g]);
#pragma unroll
        for (int j = 0; j < kTokens; ++j)
          if (j < tokens) acc[j] = fmaf(wk, __half2float(x[(m0 + j) * K + k]), acc[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kTokens; ++j) {
      float v = acc[j];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0 && j < tokens) y[(m0 + j) * N + row] = __float2half_rn(bias ? v + bias[row] : v);
    }
  }
}

}  // namespace

void launch_w4a16_simple(const W4A16Args& a, Stream stream) {
  const std::int64_t blocks = (a.n + kWarps - 1) / kWarps;
  QEVAL_CUDA_EXPECT(blocks < (std::int64_t{1} << 31), "w4a16 simple: N too large");
  w4a16_simple_kernel<<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(
      static_cast<const __half*>(a.x), a.qweight, a.scales, a.zeros, a.bias, static_cast<__half*>(a.y), a.m, a.n,
      a.k, a.group_size);
  QEVAL_CUDA_CHECK_LAUNCH(w4a16_simple_kernel);
}

}  // namespace qeval::kernels::cuda::detail
