// Fused absmax int8 quantisation (kernels/cuda/absmax_quantize.h).
//
// Per token, one read of x: a row belongs to 1, 2, 4 or 8 warps, which load the whole row into
// registers (up to 8 × 16 bytes per thread, so rows up to 16384 halves or 8192 floats), reduce
// its max (warp shuffles, then shared memory across the row's warps), and quantise from the
// registers; one launch, x read once, q written once. Rows are short (GPT-2: 768 halves = 96
// vectors), so small rows get one warp each and a block holds several rows: no idle threads and
// no block-wide barrier for them. Longer rows (or K not a multiple of the vector width, or
// unaligned pointers) use the block-per-row kernel that re-reads the row from L1/L2.
//
// Per group of rows: the group spans many blocks, so its max needs a grid-wide reduction before
// any value is rounded. When the caller wants per-row scales and the tensor fits in the
// registers of the resident blocks, a cooperative kernel does it with one read of x
// (absmax_quantize_resident.cu); otherwise launch_group_absmax_scales (atomic max of block
// maxima), then an elementwise quantisation launch (the second read of x mostly hits L2). Memory-bound: 16-byte
// loads whenever K and the pointers allow, int64 indices throughout (M·K may pass 2³¹).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <string>

#include "kernels/cuda/absmax.cuh"
#include "kernels/cuda/absmax_quantize.h"
#include "kernels/cuda/check.cuh"

namespace qeval::kernels::cuda {
namespace detail {
namespace {

constexpr int kThreads = 256;

// grid: one block per row. x [M, K], q [M, K], scales [M].
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const T* __restrict__ x, std::int64_t k,
                                                                 std::int8_t* __restrict__ q,
                                                                 float* __restrict__ scales,
                                                                 float* __restrict__ row_scales) {
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
  if (threadIdx.x == 0) {
    scales[row] = s;
    if (row_scales) row_scales[row] = s;
  }
  for (std::int64_t i = static_cast<std::int64_t>(threadIdx.x) * VEC; i < k; i += kThreads * VEC) {
    float v[VEC];
    load_as_float<T, VEC>(xr + i, v);
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = absmax_round(v[j], s);
    store_q<VEC>(qr + i, v);
  }
}

// One read of x per row: WARPS warps own a row and keep it in registers (VPT 16-byte vectors per
// thread, so a row of up to WARPS · 32 · VPT vectors); 8 / WARPS rows per 256-thread block.
// Requires K a multiple of the vector width and 16-byte aligned x, 8- or 4-byte aligned q.
template <typename T, int WARPS, int VPT>
__global__ void __launch_bounds__(kThreads) quantize_rows_registers_kernel(const T* __restrict__ x, std::int64_t m,
                                                                           std::int64_t k,
                                                                           std::int8_t* __restrict__ q,
                                                                           float* __restrict__ scales,
                                                                           float* __restrict__ row_scales) {
  constexpr int VEC = kVec16<T>, ROWS = 8 / WARPS, TPR = WARPS * 32;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = (warp % WARPS) * 32 + lane;  // thread within its row
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * ROWS + warp / WARPS;
  const bool live = row < m;
  const std::int64_t vectors = k / VEC;
  const uint4* xr = reinterpret_cast<const uint4*>(x + (live ? row : 0) * k);
  uint4 raw[VPT];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const std::int64_t j = t + static_cast<std::int64_t>(i) * TPR;
    if (live && j < vectors) {
      raw[i] = __ldcs(xr + j);  // streamed: x is not read again
      float v[VEC];
      unpack_as_float<T>(raw[i], v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) amax = fmaxf(amax, fabsf(v[e]));
    }
  }
  amax = warp_max(amax);
  if constexpr (WARPS > 1) {
    __shared__ float partial[8];
    if (lane == 0) partial[warp] = amax;
    __syncthreads();
    const int first = warp - warp % WARPS;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) amax = fmaxf(amax, partial[first + w]);
  }
  if (!live) return;
  const float s = absmax_scale(amax);
  if (t == 0) {
    scales[row] = s;
    if (row_scales) row_scales[row] = s;
  }
  std::int8_t* qr = q + row * k;
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    const std::int64_t j = t + static_cast<std::int64_t>(i) * TPR;
    if (j < vectors) {
      float v[VEC];
      unpack_as_float<T>(raw[i], v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[e] = absmax_round(v[e], s);
      store_q<VEC>(qr + j * VEC, v);
    }
  }
}

// Grid-stride over all VEC-vectors; group_elems (rows_per_scale · K) is a multiple of VEC, so
// a vector never straddles two groups. scales already hold the finished per-group scales.
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) quantize_groups_kernel(const T* __restrict__ x, std::int64_t total,
                                                                   std::int64_t group_elems,
                                                                   const float* __restrict__ scales,
                                                                   std::int8_t* __restrict__ q, std::int64_t k,
                                                                   float* __restrict__ row_scales) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads * VEC;
  for (std::int64_t i = (static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x) * VEC; i < total;
       i += stride) {
    const float s = scales[i / group_elems];
    if (row_scales && i % k == 0) row_scales[i / k] = s;  // k % VEC == 0: each row starts a vector
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

// Launches the register-resident per-token kernel with WARPS warps per row and VPT vectors per thread.
template <typename T, int WARPS, int VPT>
void launch_rows_registers(const T* x, std::int64_t m, std::int64_t k, std::int8_t* q, float* scales,
                           float* row_scales, Stream stream) {
  constexpr int ROWS = 8 / WARPS;
  const std::int64_t blocks = (m + ROWS - 1) / ROWS;
  quantize_rows_registers_kernel<T, WARPS, VPT>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, m, k, q, scales, row_scales);
  QEVAL_CUDA_CHECK_LAUNCH(quantize_rows_registers_kernel);
}

// A register-resident configuration that holds a row, or false when the row is too long for any
// (the block-per-row kernel then runs). Short rows: the fewest warps per row (more rows per block,
// no barrier), 4 vectors per thread. Rows of more than 256 vectors (K > 2048 halves): 8 warps,
// measured fastest of every configuration on an H100 (cuda_gemm_bench's sweep, issue 33): at
// M 2048, K 4096 f16, 14.3 µs against 15.9 µs for 4 warps; K 3072, 12.1 against 12.5 µs.
template <typename T>
bool try_rows_registers(const T* x, std::int64_t m, std::int64_t k, std::int8_t* q, float* scales, float* row_scales,
                        Stream stream) {
  const std::int64_t vectors = k / kVec16<T>;
  if (vectors <= 32 * 4)
    launch_rows_registers<T, 1, 4>(x, m, k, q, scales, row_scales, stream);
  else if (vectors <= 64 * 4)
    launch_rows_registers<T, 2, 4>(x, m, k, q, scales, row_scales, stream);
  else if (vectors <= 256 * 4)
    launch_rows_registers<T, 8, 4>(x, m, k, q, scales, row_scales, stream);
  else if (vectors <= 256 * 8)
    launch_rows_registers<T, 8, 8>(x, m, k, q, scales, row_scales, stream);
  else
    return false;
  return true;
}

template <typename T>
bool vectorisable(const void* x, const void* q, std::int64_t k) {
  return k % kVec16<T> == 0 && aligned16(x) && reinterpret_cast<std::uintptr_t>(q) % kVec16<T> == 0;
}

template <typename T>
void quantize_typed(const T* x, std::int64_t m, std::int64_t k, std::int64_t rows_per_scale, std::int8_t* q,
                    float* scales, float* row_scales, Stream stream) {
  constexpr int V = kVec16<T>;
  const bool vec = vectorisable<T>(x, q, k);
  if (rows_per_scale == 1) {
    QEVAL_CUDA_EXPECT(m < (std::int64_t{1} << 31), "absmax quantise: too many rows (" + std::to_string(m) + ")");
    if (vec && quantize_rows_path() == QuantizeRowsKernel::registers &&
        try_rows_registers(x, m, k, q, scales, row_scales, stream))
      return;
    if (vec)
      quantize_rows_kernel<T, V><<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, k, q, scales, row_scales);
    else
      quantize_rows_kernel<T, 1><<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, k, q, scales, row_scales);
    QEVAL_CUDA_CHECK_LAUNCH(quantize_rows_kernel);
    return;
  }
  const std::int64_t total = m * k, group_elems = rows_per_scale * k;
  const std::int64_t groups = (m + rows_per_scale - 1) / rows_per_scale;
  if (vec) {
    group_scales<T, V>(x, total, group_elems, groups, scales, stream);
    quantize_groups_kernel<T, V>
        <<<grid_for(total / V), kThreads, 0, stream>>>(x, total, group_elems, scales, q, k, row_scales);
  } else {
    group_scales<T, 1>(x, total, group_elems, groups, scales, stream);
    quantize_groups_kernel<T, 1>
        <<<grid_for(total), kThreads, 0, stream>>>(x, total, group_elems, scales, q, k, row_scales);
  }
  QEVAL_CUDA_CHECK_LAUNCH(quantize_groups_kernel);
}

template <typename T>
void group_scales_dispatch(const T* p, std::int64_t total, std::int64_t cols, std::int64_t group_elems,
                           std::int64_t groups, float* scales, Stream stream) {
  if (cols % kVec16<T> == 0 && aligned16(p))
    group_scales<T, kVec16<T>>(p, total, group_elems, groups, scales, stream);
  else
    group_scales<T, 1>(p, total, group_elems, groups, scales, stream);
}

}  // namespace

namespace {

// QEVAL_QUANTIZE_ROWS=reread selects the block-per-row kernel without a rebuild.
std::atomic<QuantizeRowsKernel>& rows_kernel() {
  static std::atomic<QuantizeRowsKernel> k{[] {
    const char* v = std::getenv("QEVAL_QUANTIZE_ROWS");
    return v && std::string(v) == "reread" ? QuantizeRowsKernel::reread : QuantizeRowsKernel::registers;
  }()};
  return k;
}

}  // namespace

QuantizeRowsKernel quantize_rows_path() { return rows_kernel().load(std::memory_order_relaxed); }

void launch_group_absmax_scales(const void* x, FloatType x_type, std::int64_t rows, std::int64_t cols,
                                std::int64_t rows_per_scale, float* scales, Stream stream) {
  const std::int64_t total = rows * cols, group_elems = rows_per_scale * cols;
  const std::int64_t groups = (rows + rows_per_scale - 1) / rows_per_scale;
  switch (x_type) {
    case FloatType::f32:
      group_scales_dispatch(static_cast<const float*>(x), total, cols, group_elems, groups, scales, stream);
      break;
    case FloatType::f16:
      group_scales_dispatch(static_cast<const __half*>(x), total, cols, group_elems, groups, scales, stream);
      break;
    case FloatType::bf16:
      group_scales_dispatch(static_cast<const __nv_bfloat16*>(x), total, cols, group_elems, groups, scales, stream);
      break;
  }
}

}  // namespace detail

void absmax_quantize_int8_rows(const void* x, FloatType x_type, std::int64_t m, std::int64_t k,
                               std::int64_t rows_per_scale, std::int8_t* q, float* scales, float* row_scales,
                               Stream stream) {
  QEVAL_CUDA_EXPECT(m > 0 && k > 0 && rows_per_scale > 0,
                    "absmax_quantize_int8: sizes must be positive, got M " + std::to_string(m) + ", K " +
                        std::to_string(k) + ", rows per scale " + std::to_string(rows_per_scale));
  QEVAL_CUDA_EXPECT(x && q && scales, "absmax_quantize_int8: null pointer for x, q or scales");
  rows_per_scale = std::min(rows_per_scale, m);
  if (rows_per_scale > 1 &&
      detail::try_quantize_groups_resident(x, x_type, m, k, rows_per_scale, q, scales, row_scales, stream))
    return;
  switch (x_type) {
    case FloatType::f32:
      detail::quantize_typed(static_cast<const float*>(x), m, k, rows_per_scale, q, scales, row_scales, stream);
      break;
    case FloatType::f16:
      detail::quantize_typed(static_cast<const __half*>(x), m, k, rows_per_scale, q, scales, row_scales, stream);
      break;
    case FloatType::bf16:
      detail::quantize_typed(static_cast<const __nv_bfloat16*>(x), m, k, rows_per_scale, q, scales, row_scales,
                             stream);
      break;
  }
}

bool absmax_quantize_rows_f16_config(const void* x, std::int64_t m, std::int64_t k, int warps, int vectors,
                                     std::int8_t* q, float* scales, Stream stream) {
  using T = __half;
  const auto* xh = static_cast<const T*>(x);
  const std::int64_t needed = (k / detail::kVec16<T> + warps * 32 - 1) / (warps * 32);  // vectors per thread
  if (m <= 0 || !detail::vectorisable<T>(x, q, k) || needed > vectors) return false;
#define QEVAL_CONFIG(W, V) \
  if (warps == W && vectors == V) return detail::launch_rows_registers<T, W, V>(xh, m, k, q, scales, nullptr, stream), true;
#define QEVAL_CONFIGS(W) QEVAL_CONFIG(W, 1) QEVAL_CONFIG(W, 2) QEVAL_CONFIG(W, 4) QEVAL_CONFIG(W, 8)
  QEVAL_CONFIGS(1)
  QEVAL_CONFIGS(2)
  QEVAL_CONFIGS(4)
  QEVAL_CONFIGS(8)
#undef QEVAL_CONFIGS
#undef QEVAL_CONFIG
  return false;
}

void set_quantize_rows_kernel(QuantizeRowsKernel kernel) {
  detail::rows_kernel().store(kernel, std::memory_order_relaxed);
}

void absmax_quantize_int8(const void* x, FloatType x_type, std::int64_t m, std::int64_t k, std::int64_t rows_per_scale,
                          std::int8_t* q, float* scales, Stream stream) {
  absmax_quantize_int8_rows(x, x_type, m, k, rows_per_scale, q, scales, nullptr, stream);
}

}  // namespace qeval::kernels::cuda
