// 4-bit weight dequantisation (kernels/cuda/w4_dequantize.h). Memory-bound: a thread turns one
// 32-bit word of packed weights (8 values) into one 16-byte store of halves (two of floats) when
// K is a multiple of 8 and the pointers allow; otherwise one value per thread.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/absmax.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/w4_dequantize.h"

namespace qeval::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float dequantize_one(unsigned code, float z, float s) {
  return __fmul_rn(__fsub_rn(static_cast<float>(code), z), s);
}

// One thread per 8 consecutive k of one row (K % 8 == 0, so a word never straddles two rows);
// the group is looked up per value, so any group size works.
template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    dequantize_words_kernel(const std::uint32_t* __restrict__ qweight, const float* __restrict__ scales,
                            const float* __restrict__ zeros, std::int64_t n, std::int64_t k, std::int64_t group_size,
                            OutT* __restrict__ out) {
  const std::int64_t words_per_row = k / 8, total = n * words_per_row, groups = (k + group_size - 1) / group_size;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  for (std::int64_t w = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; w < total; w += stride) {
    const std::int64_t row = w / words_per_row, k0 = (w % words_per_row) * 8;
    const std::uint32_t bits = qweight[w];
    const float* s = scales + row * groups;
    const float* z = zeros + row * groups;
    float v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const std::int64_t g = (k0 + i) / group_size;
      v[i] = dequantize_one((bits >> (4 * i)) & 15u, z[g], s[g]);
    }
    OutT* dst = out + row * k + k0;
    if constexpr (sizeof(OutT) == 2) {
      alignas(16) OutT h[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) h[i] = detail::from_float<OutT>(v[i]);
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(h);
    } else {
      reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
      reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
  }
}

// Any K and alignment: one value per thread.
template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    dequantize_values_kernel(const std::uint8_t* __restrict__ qweight, const float* __restrict__ scales,
                             const float* __restrict__ zeros, std::int64_t n, std::int64_t k, std::int64_t group_size,
                             OutT* __restrict__ out) {
  const std::int64_t total = n * k, row_bytes = (k + 1) / 2, groups = (k + group_size - 1) / group_size;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total; i += stride) {
    const std::int64_t row = i / k, col = i % k, g = col / group_size;
    const unsigned code = (qweight[row * row_bytes + col / 2] >> (4 * (col % 2))) & 15u;
    out[i] = detail::from_float<OutT>(dequantize_one(code, zeros[row * groups + g], scales[row * groups + g]));
  }
}

int grid_for(std::int64_t items) {
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>((items + kThreads - 1) / kThreads, 16384)));
}

template <typename OutT>
void run(const std::uint8_t* qweight, const float* scales, const float* zeros, std::int64_t n, std::int64_t k,
         std::int64_t group_size, OutT* out, Stream stream) {
  const bool words = k % 8 == 0 && reinterpret_cast<std::uintptr_t>(qweight) % 4 == 0 && detail::aligned16(out);
  if (words) {
    dequantize_words_kernel<OutT><<<grid_for(n * (k / 8)), kThreads, 0, stream>>>(
        reinterpret_cast<const std::uint32_t*>(qweight), scales, zeros, n, k, group_size, out);
    QEVAL_CUDA_CHECK_LAUNCH(dequantize_words_kernel);
  } else {
    dequantize_values_kernel<OutT>
        <<<grid_for(n * k), kThreads, 0, stream>>>(qweight, scales, zeros, n, k, group_size, out);
    QEVAL_CUDA_CHECK_LAUNCH(dequantize_values_kernel);
  }
}

}  // namespace

void w4_dequantize(const std::uint8_t* qweight, const float* scales, const float* zeros, std::int64_t n,
                   std::int64_t k, std::int64_t group_size, void* out, FloatType out_type, Stream stream) {
  QEVAL_CUDA_EXPECT(n > 0 && k > 0 && group_size > 0,
                    "w4_dequantize: sizes must be positive, got N " + std::to_string(n) + ", K " + std::to_string(k) +
                        ", group " + std::to_string(group_size));
  QEVAL_CUDA_EXPECT(qweight && scales && zeros && out, "w4_dequantize: null pointer");
  group_size = std::min(group_size, k);
  switch (out_type) {
    case FloatType::f32: run(qweight, scales, zeros, n, k, group_size, static_cast<float*>(out), stream); break;
    case FloatType::f16: run(qweight, scales, zeros, n, k, group_size, static_cast<__half*>(out), stream); break;
    case FloatType::bf16:
      run(qweight, scales, zeros, n, k, group_size, static_cast<__nv_bfloat16*>(out), stream);
      break;
  }
}

}  // namespace qeval::kernels::cuda
