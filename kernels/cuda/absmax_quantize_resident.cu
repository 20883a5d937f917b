// Per-group absmax quantisation (per sequence, per tensor) with one read of x
// (kernels/cuda/absmax_quantize.h): a cooperative kernel whose blocks are all resident at once.
//
// A group's scale needs the max over rows held by many blocks before any of its values is
// rounded. The two-pass way (launch_group_absmax_scales, then quantise) reads x twice and takes
// four launches (zero the maxima, block max + atomic, max → scale, quantise). Here each block
// loads whole rows into registers (up to 8 × 16 bytes per thread), writes each row's max, waits
// at a grid-wide barrier, reduces the maxima of the rows of its groups (a few thousand floats
// from L2 at most), waits again (the row maxima are then overwritten by the per-row scales), and
// rounds from its registers: x is read once, in one launch. It applies when the whole tensor fits
// in the registers of the resident blocks (about 17 MB on an H100/H200: 2048 × 4096 f16 does,
// Llama's 2048 × 11008 does not), the caller wants per-row scales (their buffer holds the row
// maxima in between) and the device supports cooperative launches; otherwise the two-pass path
// runs. QEVAL_QUANTIZE_GROUPS=two-pass switches this kernel off without a rebuild.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

#include "kernels/cuda/absmax.cuh"
#include "kernels/cuda/check.cuh"

namespace qeval::kernels::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kVpt = 8;               // 16-byte vectors per thread
constexpr int kMaxRowsPerBlock = 64;  // bounds the shared arrays below

// grid: ceil(M / rows_per_block) blocks, all resident (cooperative launch). x [M, K], q [M, K],
// scales [ceil(M / rows_per_scale)], row_scales [M]; K a multiple of the vector width,
// rows_per_block · K / VEC ≤ kThreads · kVpt, rows_per_block ≤ kMaxRowsPerBlock.
// Four blocks per SM (≤ 64 registers, half of them the row data): 4 · 132 · 256 · 8 · 16 bytes
// ≈ 17.3 MB on chip, enough for 2048 × 4096 f16 activations.
template <typename T>
__global__ void __launch_bounds__(kThreads, 4)
    quantize_groups_resident_kernel(const T* __restrict__ x, std::int64_t m, std::int64_t k,
                                    std::int64_t rows_per_scale, int rows_per_block, std::int8_t* __restrict__ q,
                                    float* __restrict__ scales, float* __restrict__ row_scales) {
  constexpr int VEC = kVec16<T>;
  __shared__ unsigned int row_bits[kMaxRowsPerBlock];  // row maxima as float bits (non-negative: order as uint)
  __shared__ float group_scale[kMaxRowsPerBlock];
  // 32-bit offsets within the block (vpr ≤ kThreads · kVpt, checked on the host): fewer registers.
  const int vpr = static_cast<int>(k / VEC);
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.x) * rows_per_block;
  const int rows = static_cast<int>(min(static_cast<std::int64_t>(rows_per_block), m - row0));
  const int nvec = rows * vpr;
  const uint4* xb = reinterpret_cast<const uint4*>(x + row0 * k);

  for (int r = threadIdx.x; r < kMaxRowsPerBlock; r += kThreads) row_bits[r] = 0;
  __syncthreads();
  uint4 raw[kVpt];
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int j = static_cast<int>(threadIdx.x) + i * kThreads;
    if (j < nvec) {
      raw[i] = __ldcs(xb + j);  // streamed: x is not read again
      float v[VEC];
      unpack_as_float<T>(raw[i], v);
      float amax = 0.0f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) amax = fmaxf(amax, fabsf(v[e]));
      atomicMax(&row_bits[j / vpr], __float_as_uint(amax));
    }
  }
  __syncthreads();
  for (int r = threadIdx.x; r < rows; r += kThreads) row_scales[row0 + r] = __uint_as_float(row_bits[r]);
  cooperative_groups::this_grid().sync();

  // The scale of every group this block's rows belong to (at most `rows` groups).
  const std::int64_t g0 = row0 / rows_per_scale, g1 = (row0 + rows - 1) / rows_per_scale;
  for (std::int64_t g = g0; g <= g1; ++g) {
    const std::int64_t begin = g * rows_per_scale, end = min(m, begin + rows_per_scale);
    float amax = 0.0f;
    for (std::int64_t r = begin + threadIdx.x; r < end; r += kThreads) amax = fmaxf(amax, __ldcg(row_scales + r));
    amax = block_max_nonneg(amax);  // all threads take the same g range: the barriers inside match
    if (threadIdx.x == 0) group_scale[g - g0] = absmax_scale(amax);
  }
  cooperative_groups::this_grid().sync();  // every block has read the row maxima: overwrite them

  for (int r = threadIdx.x; r < rows; r += kThreads) {
    const std::int64_t row = row0 + r;
    const float s = group_scale[row / rows_per_scale - g0];
    row_scales[row] = s;
    if (row % rows_per_scale == 0) scales[row / rows_per_scale] = s;
  }
  std::int8_t* qb = q + row0 * k;
#pragma unroll
  for (int i = 0; i < kVpt; ++i) {
    const int j = static_cast<int>(threadIdx.x) + i * kThreads;
    if (j < nvec) {
      const float s = group_scale[(row0 + j / vpr) / rows_per_scale - g0];
      float v[VEC];
      unpack_as_float<T>(raw[i], v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[e] = absmax_round(v[e], s);
      store_q<VEC>(qb + static_cast<std::int64_t>(j) * VEC, v);
    }
  }
}

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("QEVAL_QUANTIZE_GROUPS");
    return !(v && std::string(v) == "two-pass");
  }();
  return on;
}

// Blocks of this kernel that can be resident at once on the current device (0: no cooperative launch).
template <typename T>
std::int64_t resident_blocks() {
  static std::mutex mutex;
  static int cached[64] = {};  // per device; -1 means none
  int device = 0;
  QEVAL_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= 64) return 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (cached[device] == 0) {
    int coop = 0, sms = 0, per_sm = 0;
    QEVAL_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device));
    QEVAL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    QEVAL_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, quantize_groups_resident_kernel<T>, kThreads, 0));
    cached[device] = coop && per_sm > 0 ? per_sm * sms : -1;
  }
  return cached[device] > 0 ? cached[device] : 0;
}

template <typename T>
bool try_resident(const T* x, std::int64_t m, std::int64_t k, std::int64_t rows_per_scale, std::int8_t* q,
                  float* scales, float* row_scales, Stream stream) {
  constexpr int VEC = kVec16<T>;
  if (!enabled() || !row_scales || k % VEC != 0 || !aligned16(x) ||
      reinterpret_cast<std::uintptr_t>(q) % VEC != 0)
    return false;
  const std::int64_t vpr = k / VEC, capacity = static_cast<std::int64_t>(kThreads) * kVpt;
  if (vpr > capacity) return false;
  const std::int64_t max_blocks = resident_blocks<T>();
  if (max_blocks == 0) return false;
  // As many blocks as can be resident (bandwidth), whole rows each, within the register capacity.
  const std::int64_t most_rows = std::min<std::int64_t>(kMaxRowsPerBlock, capacity / vpr);
  const std::int64_t rows_per_block = std::clamp<std::int64_t>((m + max_blocks - 1) / max_blocks, 1, most_rows);
  const std::int64_t blocks = (m + rows_per_block - 1) / rows_per_block;
  if (blocks > max_blocks) return false;  // the tensor does not fit on chip
  int rpb = static_cast<int>(rows_per_block);
  void* args[] = {&x, &m, &k, &rows_per_scale, &rpb, &q, &scales, &row_scales};
  QEVAL_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(quantize_groups_resident_kernel<T>),
                                               dim3(static_cast<unsigned>(blocks)), dim3(kThreads), args, 0, stream));
  return true;
}

}  // namespace

bool try_quantize_groups_resident(const void* x, FloatType x_type, std::int64_t m, std::int64_t k,
                                  std::int64_t rows_per_scale, std::int8_t* q, float* scales, float* row_scales,
                                  Stream stream) {
  switch (x_type) {
    case FloatType::f32:
      return try_resident(static_cast<const float*>(x), m, k, rows_per_scale, q, scales, row_scales, stream);
    case FloatType::f16:
      return try_resident(static_cast<const __half*>(x), m, k, rows_per_scale, q, scales, row_scales, stream);
    case FloatType::bf16:
      return try_resident(static_cast<const __nv_bfloat16*>(x), m, k, rows_per_scale, q, scales, row_scales, stream);
  }
  return false;
}

}  // namespace qeval::kernels::cuda::detail
