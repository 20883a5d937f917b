// Device helpers shared by the absmax quantiser and the int8 epilogue (internal, CUDA only):
// vector loads that widen f32 / f16 / bf16 to float, the reference rounding, block max reductions, and the
// launcher of the per-group scale pass.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/absmax_quantize.h"
#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda::detail {

// Elements per 16-byte access: 4 floats or 8 halves / bfloat16s.
template <typename T>
constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Two 16-bit values packed in a 32-bit word → two floats (exact widening).
template <typename T>
__device__ __forceinline__ float2 pair_to_float2(unsigned int bits) {
  if constexpr (std::is_same_v<T, __half>)
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  else  // bfloat16 is the upper half of a float32: widening is a shift (exact), low element first
    return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xFFFF0000u));
}

// v = float(elements of a raw 16-byte vector of T).
template <typename T>
__device__ __forceinline__ void unpack_as_float(const uint4& raw, float (&v)[kVec16<T>]) {
  if constexpr (sizeof(T) == 4) {
    v[0] = __uint_as_float(raw.x), v[1] = __uint_as_float(raw.y), v[2] = __uint_as_float(raw.z),
    v[3] = __uint_as_float(raw.w);
  } else {
    const unsigned int w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = pair_to_float2<T>(w[i]);
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
}

// v[0..VEC) = float(p[0..VEC)); p aligned to VEC * sizeof(T) bytes when VEC > 1.
template <typename T, int VEC>
__device__ __forceinline__ void load_as_float(const T* p, float (&v)[VEC]) {
  if constexpr (VEC == 1) {
    v[0] = to_float(*p);
  } else {
    static_assert(VEC == kVec16<T>, "vectors are 16 bytes");
    unpack_as_float<T>(*reinterpret_cast<const uint4*>(p), v);
  }
}

// float → T with round-to-nearest-even (what a CPU float → half / bfloat16 cast does).
template <typename T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(v);
  else
    return v;
}

// Stores float values as T with round-to-nearest-even.
template <typename T, int VEC>
__device__ __forceinline__ void store_from_float(T* p, const float (&v)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) p[i] = from_float<T>(v[i]);
}

// The reference scale: max|x| / 127 with IEEE division, 1 for an all-zero group.
__device__ __forceinline__ float absmax_scale(float amax) { return amax > 0.0f ? __fdiv_rn(amax, 127.0f) : 1.0f; }

// The reference rounding: clamp(rint(x / s), −127, 127). __fdiv_rn keeps the division IEEE
// even under --use_fast_math; rintf rounds half to even.
__device__ __forceinline__ float absmax_round(float x, float s) {
  return fminf(fmaxf(rintf(__fdiv_rn(x, s)), -127.0f), 127.0f);
}

// Stores VEC rounded values (each in [−127, 127]) as consecutive int8: one 4- or 8-byte store
// when VEC > 1 (q aligned to VEC bytes).
template <int VEC>
__device__ __forceinline__ void store_q(std::int8_t* q, const float (&r)[VEC]) {
  if constexpr (VEC == 1) {
    q[0] = static_cast<std::int8_t>(r[0]);
  } else {
    std::int8_t packed[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) packed[i] = static_cast<std::int8_t>(r[i]);
    if constexpr (VEC == 4)
      *reinterpret_cast<std::uint32_t*>(q) = *reinterpret_cast<const std::uint32_t*>(packed);
    else
      *reinterpret_cast<uint2*>(q) = *reinterpret_cast<const uint2*>(packed);
  }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Max of non-negative values over the block; every thread gets it. blockDim.x a multiple of 32.
__device__ __forceinline__ float block_max_nonneg(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();  // partial may still be read from a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.0f;
  return warp_max(v);
}

// scales[g] = absmax_scale(max |x| over rows [g·rows_per_scale, (g+1)·rows_per_scale) of x [rows, cols]).
// Three stream-ordered steps: zero the maxima, block-reduced atomic max (the float bits of a
// non-negative float order like unsigned integers), max → scale in place.
void launch_group_absmax_scales(const void* x, FloatType x_type, std::int64_t rows, std::int64_t cols,
                                std::int64_t rows_per_scale, float* scales, Stream stream);

// Per-group quantisation reading x once, by a cooperative kernel with every block resident
// (absmax_quantize_resident.cu). Returns false, having launched nothing, where it does not apply
// (row_scales null, the tensor too large for the registers of the resident blocks, K off the
// vector width, unaligned pointers, no cooperative launch, QEVAL_QUANTIZE_GROUPS=two-pass).
bool try_quantize_groups_resident(const void* x, FloatType x_type, std::int64_t m, std::int64_t k,
                                  std::int64_t rows_per_scale, std::int8_t* q, float* scales, float* row_scales,
                                  Stream stream);

// Which per-token kernel runs (absmax_quantize.h QuantizeRowsKernel).
QuantizeRowsKernel quantize_rows_path();

// Whether p is aligned for 16-byte accesses.
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace qeval::kernels::cuda::detail
