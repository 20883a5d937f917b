// Fused absmax int8 quantisation (kernels/cuda/absmax_quantize.h).
//
// Per token: one block per row computes the row's max, then re-reads the row (from L1/L2) and
// writes q; one launch. Per group of rows: the group spans many blocks, so its max needs a
// grid-wide reduction before any value is rounded: launch_group_absmax_scales (atomic max of
// block maxima), then an elementwise quantisation launch. Memory-bound: 16-byte loads whenever
// K and the pointers allow, int64 indices throughout (M·K may pass 2³¹).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/absmax.cuh"
#include "kernels/cuda/absmax_quantize.h"
#include "kernels/cuda/check.cuh"

namespace qeval::kernels::cuda {
namespace detail {
namespace {

constexpr int kThreads = 256;

template <int VEC>
__device__ __forceinline__ void store_q(std::int8_t* q, const float (&r)[VEC]) {
  if constexpr (VEC == 1) {
    q[0] = static_cast<std::int8_t>(r[0]);
  } else {
    // VEC consecutive int8 in one store (4 or 8 bytes).
    std::int8_t packed[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) packed[i] = static_cast<std::int8_t>(r[i]);
    if constexpr (VEC == 4)
      *reinterpret_cast<std::uint32_t*>(q) = *reinterpret_cast<const std::uint32_t*>(packed);
    else
      *reinterpret_cast<uint2*>(q) = *reinterpret_cast<const uint2*>(packed);
  }
}

// grid: one block per row. x [M, K], q [M, K], scales [M].
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const T* __restrict__ x, std::int64_t k,
                                                                 std::int8_t* __restrict__ q,
                                                                 float* __restrict__ scales) {
  const std::int64_t row = blockIdx.x;
  const T* xr = x + row * k;
  std::int8_t* qr = q + row * k;
  float amax = 0.0f;
  for (std::int64_t i = static_cast<std::int64_t>(threadIdx.x) * VEC; i < k; i += kThreads * VEC) {
    float v[VEC];
    load_as_float<T, VEC>(xr + i, v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) amax = fmaxf(amax, fabsf(v[j]));
  }
  const float s = absmax_scale(block_max_nonneg(amax));
  if (threadIdx.x == 0) scales[row] = s;
  for (std::int64_t i = static_cast<std::int64_t>(threadIdx.x) * VEC; i < k; i += kThreads * VEC) {
    float v[VEC];
    load_as_float<T, VEC>(xr + i, v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = absmax_round(v[j], s);
    store_q<VEC>(qr + i, v);
  }
}

// Grid-stride over all VEC-vectors; group_elems (rows_per_scale · K) is a multiple of VEC, so
// a vector never straddles two groups. scales already hold the finished per-group scales.
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) quantize_groups_kernel(const T* __restrict__ x, std::int64_t total,
                                                                   std::int64_t group_elems,
                                                                   const float* __restrict__ scales,
                                                                   std::int8_t* __restrict__ q) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads * VEC;
  for (std::int64_t i = (static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x) * VEC; i < total;
       i += stride) {
    const float s = scales[i / group_elems];
    float v[VEC];
    load_as_float<T, VEC>(x + i, v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = absmax_round(v[j], s);
    store_q<VEC>(q + i, v);
  }
}

// Block b covers part (b % parts) of group (b / parts): one atomic per block, not per element.
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) group_amax_kernel(const T* __restrict__ x, std::int64_t total,
                                                              std::int64_t group_elems, int parts,
                                                              unsigned int* __restrict__ amax_bits) {
  const std::int64_t group = blockIdx.x / parts;
  const int part = static_cast<int>(blockIdx.x % parts);
  const std::int64_t begin = group * group_elems;
  const std::int64_t end = min(total, begin + group_elems);
  float amax = 0.0f;
  for (std::int64_t i = begin + (static_cast<std::int64_t>(part) * kThreads + threadIdx.x) * VEC; i < end;
       i += static_cast<std::int64_t>(parts) * kThreads * VEC) {
    float v[VEC];
    load_as_float<T, VEC>(x + i, v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) amax = fmaxf(amax, fabsf(v[j]));
  }
  amax = block_max_nonneg(amax);
  if (threadIdx.x == 0) atomicMax(amax_bits + group, __float_as_uint(amax));
}

__global__ void amax_to_scale_kernel(float* scales, std::int64_t groups) {
  const std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < groups) scales[g] = absmax_scale(scales[g]);  // the bits written by atomicMax are the float max
}

int grid_for(std::int64_t vectors) {
  // Enough blocks to fill any current GPU several times over; the loops stride past the rest.
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>((vectors + kThreads - 1) / kThreads, 8192)));
}

template <typename T, int VEC>
void group_scales(const T* x, std::int64_t total, std::int64_t group_elems, std::int64_t groups, float* scales,
                  Stream stream) {
  QEVAL_CUDA_CHECK(cudaMemsetAsync(scales, 0, static_cast<std::size_t>(groups) * sizeof(float), stream));
  // About 64 vectors per thread per block, at most 256 blocks per group.
  const std::int64_t per_block = static_cast<std::int64_t>(kThreads) * VEC * 64;
  const int parts = static_cast<int>(std::clamp<std::int64_t>((group_elems + per_block - 1) / per_block, 1, 256));
  const std::int64_t blocks = groups * parts;
  QEVAL_CUDA_EXPECT(blocks < (std::int64_t{1} << 31), "absmax quantise: too many row groups (" +
                                                          std::to_string(groups) + ")");
  group_amax_kernel<T, VEC><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      x, total, group_elems, parts, reinterpret_cast<unsigned int*>(scales));
  QEVAL_CUDA_CHECK_LAUNCH(group_amax_kernel);
  amax_to_scale_kernel<<<static_cast<unsigned>((groups + 255) / 256), 256, 0, stream>>>(scales, groups);
  QEVAL_CUDA_CHECK_LAUNCH(amax_to_scale_kernel);
}

template <typename T>
bool vectorisable(const void* x, const void* q, std::int64_t k) {
  return k % kVec16<T> == 0 && aligned16(x) && reinterpret_cast<std::uintptr_t>(q) % kVec16<T> == 0;
}

template <typename T>
void quantize_typed(const T* x, std::int64_t m, std::int64_t k, std::int64_t rows_per_scale, std::int8_t* q,
                    float* scales, Stream stream) {
  constexpr int V = kVec16<T>;
  const bool vec = vectorisable<T>(x, q, k);
  if (rows_per_scale == 1) {
    QEVAL_CUDA_EXPECT(m < (std::int64_t{1} << 31), "absmax quantise: too many rows (" + std::to_string(m) + ")");
    if (vec)
      quantize_rows_kernel<T, V><<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, k, q, scales);
    else
      quantize_rows_kernel<T, 1><<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, k, q, scales);
    QEVAL_CUDA_CHECK_LAUNCH(quantize_rows_kernel);
    return;
  }
  const std::int64_t total = m * k, group_elems = rows_per_scale * k;
  const std::int64_t groups = (m + rows_per_scale - 1) / rows_per_scale;
  if (vec) {
    group_scales<T, V>(x, total, group_elems, groups, scales, stream);
    quantize_groups_kernel<T, V><<<grid_for(total / V), kThreads, 0, stream>>>(x, total, group_elems, scales, q);
  } else {
    group_scales<T, 1>(x, total, group_elems, groups, scales, stream);
    quantize_groups_kernel<T, 1><<<grid_for(total), kThreads, 0, stream>>>(x, total, group_elems, scales, q);
  }
  QEVAL_CUDA_CHECK_LAUNCH(quantize_groups_kernel);
}

}  // namespace

void launch_group_absmax_scales(const void* x, FloatType x_type, std::int64_t rows, std::int64_t cols,
                                std::int64_t rows_per_scale, float* scales, Stream stream) {
  const std::int64_t total = rows * cols, group_elems = rows_per_scale * cols;
  const std::int64_t groups = (rows + rows_per_scale - 1) / rows_per_scale;
  if (x_type == FloatType::f32) {
    const auto* p = static_cast<const float*>(x);
    if (cols % 4 == 0 && aligned16(p))
      group_scales<float, 4>(p, total, group_elems, groups, scales, stream);
    else
      group_scales<float, 1>(p, total, group_elems, groups, scales, stream);
  } else {
    const auto* p = static_cast<const __half*>(x);
    if (cols % 8 == 0 && aligned16(p))
      group_scales<__half, 8>(p, total, group_elems, groups, scales, stream);
    else
      group_scales<__half, 1>(p, total, group_elems, groups, scales, stream);
  }
}

}  // namespace detail

void absmax_quantize_int8(const void* x, FloatType x_type, std::int64_t m, std::int64_t k, std::int64_t rows_per_scale,
                          std::int8_t* q, float* scales, Stream stream) {
  QEVAL_CUDA_EXPECT(m > 0 && k > 0 && rows_per_scale > 0,
                    "absmax_quantize_int8: sizes must be positive, got M " + std::to_string(m) + ", K " +
                        std::to_string(k) + ", rows per scale " + std::to_string(rows_per_scale));
  QEVAL_CUDA_EXPECT(x && q && scales, "absmax_quantize_int8: null pointer for x, q or scales");
  rows_per_scale = std::min(rows_per_scale, m);
  if (x_type == FloatType::f32)
    detail::quantize_typed(static_cast<const float*>(x), m, k, rows_per_scale, q, scales, stream);
  else
    detail::quantize_typed(static_cast<const __half*>(x), m, k, rows_per_scale, q, scales, stream);
}

}  // namespace qeval::kernels::cuda
