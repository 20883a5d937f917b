// Dequantising epilogue (kernels/cuda/int8_epilogue.h): elementwise over [M, N], 4 outputs per
// thread step (one 16-byte int32 load) when N and the pointers allow. The optional output
// quantise–dequantise needs each group's max over the finished outputs, so it runs as the
// shared group-scale pass (absmax.cuh) and one more elementwise pass over the output.
// __fmul_rn / __fadd_rn pin the rounding order: nvcc would otherwise contract into FMAs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/cuda/absmax.cuh"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/int8_epilogue.h"

namespace qeval::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename OutT, int VEC>
__device__ __forceinline__ void store_vec(OutT* p, const float (&v)[VEC]) {
  if constexpr (VEC == 4 && sizeof(OutT) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else if constexpr (VEC == 4 && std::is_same_v<OutT, __nv_bfloat16>) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
    uint2 packed;
    packed.x = *reinterpret_cast<const unsigned int*>(&lo);
    packed.y = *reinterpret_cast<const unsigned int*>(&hi);
    *reinterpret_cast<uint2*>(p) = packed;
  } else if constexpr (VEC == 4 && sizeof(OutT) == 2) {
    const __half2 lo = __floats2half2_rn(v[0], v[1]), hi = __floats2half2_rn(v[2], v[3]);
    uint2 packed;
    packed.x = *reinterpret_cast<const unsigned int*>(&lo);
    packed.y = *reinterpret_cast<const unsigned int*>(&hi);
    *reinterpret_cast<uint2*>(p) = packed;
  } else {
    detail::store_from_float<OutT, VEC>(p, v);
  }
}

template <typename OutT, int VEC>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(const std::int32_t* __restrict__ acc, std::int64_t total, std::int64_t n,
                      const float* __restrict__ a_scales, std::int64_t a_rows_per_scale,
                      const float* __restrict__ w_scales, bool w_per_channel, const float* __restrict__ bias,
                      OutT* __restrict__ out) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads * VEC;
  for (std::int64_t i = (static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x) * VEC; i < total;
       i += stride) {
    const std::int64_t row = i / n, col = i % n;  // VEC divides n: the vector stays in one row
    const float sa = a_scales[row / a_rows_per_scale];
    int c[VEC];
    if constexpr (VEC == 4) {
      const int4 raw = *reinterpret_cast<const int4*>(acc + i);
      c[0] = raw.x, c[1] = raw.y, c[2] = raw.z, c[3] = raw.w;
    } else {
      c[0] = acc[i];
    }
    float v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float sw = w_scales[w_per_channel ? col + j : 0];
      v[j] = __fmul_rn(__fmul_rn(static_cast<float>(c[j]), sa), sw);
      if (bias) v[j] = __fadd_rn(v[j], bias[col + j]);
    }
    store_vec<OutT, VEC>(out + i, v);
  }
}

// In place: v → clamp(rint(v / s), −127, 127) · s, s the finished scale of v's row group.
template <typename OutT, int VEC>
__global__ void __launch_bounds__(kThreads) quantize_dequantize_kernel(OutT* __restrict__ out, std::int64_t total,
                                                                       std::int64_t group_elems,
                                                                       const float* __restrict__ scales) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads * VEC;
  for (std::int64_t i = (static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x) * VEC; i < total;
       i += stride) {
    const float s = scales[i / group_elems];
    float v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = __fmul_rn(detail::absmax_round(detail::to_float(out[i + j]), s), s);
    store_vec<OutT, VEC>(out + i, v);
  }
}

int grid_for(std::int64_t vectors) {
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>((vectors + kThreads - 1) / kThreads, 8192)));
}

template <typename OutT>
void run(const Int8EpilogueArgs& a, Stream stream) {
  auto* out = static_cast<OutT*>(a.out);
  const std::int64_t total = a.m * a.n;
  const bool vec = a.n % 4 == 0 && detail::aligned16(a.acc) &&
                   reinterpret_cast<std::uintptr_t>(out) % (4 * sizeof(OutT)) == 0;
  const std::int64_t a_rows = std::max<std::int64_t>(1, a.a_rows_per_scale);
  if (vec)
    dequantize_kernel<OutT, 4><<<grid_for(total / 4), kThreads, 0, stream>>>(
        a.acc, total, a.n, a.a_scales, a_rows, a.w_scales, a.w_per_channel, a.bias, out);
  else
    dequantize_kernel<OutT, 1><<<grid_for(total), kThreads, 0, stream>>>(a.acc, total, a.n, a.a_scales, a_rows,
                                                                          a.w_scales, a.w_per_channel, a.bias, out);
  QEVAL_CUDA_CHECK_LAUNCH(dequantize_kernel);
}

template <typename OutT>
void output_quantize_dequantize(OutT* out, std::int64_t m, std::int64_t n, std::int64_t out_rows_per_scale,
                                FloatType out_type, float* out_scales, Stream stream) {
  const std::int64_t total = m * n;
  const bool vec = n % 4 == 0 && reinterpret_cast<std::uintptr_t>(out) % (4 * sizeof(OutT)) == 0;
  const std::int64_t rows_per_scale = std::min(out_rows_per_scale, m);
  detail::launch_group_absmax_scales(out, out_type, m, n, rows_per_scale, out_scales, stream);
  const std::int64_t group_elems = rows_per_scale * n;
  if (vec)
    quantize_dequantize_kernel<OutT, 4><<<grid_for(total / 4), kThreads, 0, stream>>>(out, total, group_elems,
                                                                                     out_scales);
  else
    quantize_dequantize_kernel<OutT, 1><<<grid_for(total), kThreads, 0, stream>>>(out, total, group_elems,
                                                                                 out_scales);
  QEVAL_CUDA_CHECK_LAUNCH(quantize_dequantize_kernel);
}

}  // namespace

void int8_dequantize_epilogue(const Int8EpilogueArgs& a, Stream stream) {
  const std::string shape = " (M " + std::to_string(a.m) + ", N " + std::to_string(a.n) + ")";
  QEVAL_CUDA_EXPECT(a.m > 0 && a.n > 0, "int8_dequantize_epilogue: sizes must be positive" + shape);
  QEVAL_CUDA_EXPECT(a.acc && a.a_scales && a.w_scales && a.out,
                    "int8_dequantize_epilogue: acc, a_scales, w_scales and out are required" + shape);
  QEVAL_CUDA_EXPECT(a.a_rows_per_scale > 0, "int8_dequantize_epilogue: a_rows_per_scale must be positive, got " +
                                                std::to_string(a.a_rows_per_scale));
  QEVAL_CUDA_EXPECT(a.out_rows_per_scale <= 0 || a.out_scales,
                    "int8_dequantize_epilogue: output quantisation needs out_scales" + shape);
  QEVAL_CUDA_EXPECT(static_cast<const void*>(a.acc) != a.out, "int8_dequantize_epilogue: out may not alias acc");
  switch (a.out_type) {
    case FloatType::f32: run<float>(a, stream); break;
    case FloatType::f16: run<__half>(a, stream); break;
    case FloatType::bf16: run<__nv_bfloat16>(a, stream); break;
  }
  if (a.out_rows_per_scale > 0)
    int8_output_quantize_dequantize(a.out, a.out_type, a.m, a.n, a.out_rows_per_scale, a.out_scales, stream);
}

void int8_output_quantize_dequantize(void* out, FloatType out_type, std::int64_t m, std::int64_t n,
                                     std::int64_t out_rows_per_scale, float* out_scales, Stream stream) {
  QEVAL_CUDA_EXPECT(m > 0 && n > 0 && out_rows_per_scale > 0 && out && out_scales,
                    "int8_output_quantize_dequantize: positive sizes, out and out_scales are required");
  switch (out_type) {
    case FloatType::f32:
      output_quantize_dequantize(static_cast<float*>(out), m, n, out_rows_per_scale, out_type, out_scales, stream);
      break;
    case FloatType::f16:
      output_quantize_dequantize(static_cast<__half*>(out), m, n, out_rows_per_scale, out_type, out_scales, stream);
      break;
    case FloatType::bf16:
      output_quantize_dequantize(static_cast<__nv_bfloat16*>(out), m, n, out_rows_per_scale, out_type, out_scales,
                                 stream);
      break;
  }
}

}  // namespace qeval::kernels::cuda
