// Attention statistics on tensor cores (kernels/cuda/attention_stats_tensor_cores.h says what).
//
// One block of 4 warps per (64 queries, head, batch row). The block's q rows sit in shared memory
// as 16-bit values (head size zero-padded to a multiple of 16); tiles of 64 keys follow. Each warp
// computes the 16 × 64 logits of its 16 queries with WMMA fragments (q row-major, k read as the
// column-major Bᵀ it already is) and stores them, float32, to its own rows of a shared score tile.
// Then two lanes own each query row, 32 keys each: a first sweep scales, caps and masks the logits
// (written back) and finds the pair's maximum and how many keys hold it; a second sweep adds
// exp(s − m) and exp(s − m)(s − m). The pair combines by one shuffle, so both lanes carry the same
// online state (m, ℓ, E, S, key 1's logit, the largest logit and its tie count) — the state of
// fused_attention_kernel in fused_attention_stats.cu, finished by the same write_query_stats
// (attention_query_stats.cuh).
//
// Shared-memory banks: rows of the 16-bit tiles are padded by 8 elements (WMMA's leading dimension
// must be a multiple of 8; the pad moves successive rows by 4 banks). Score rows are 68 floats
// (a multiple of 4 for WMMA's float store): row r starts 4r banks on, and lane (r, half) starts
// its sweep (r / 8) + 2·half columns into its 32, so the 32 lanes of a step read 32 banks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/absmax.cuh"
#include "kernels/cuda/attention_query_stats.cuh"
#include "kernels/cuda/attention_stats_tensor_cores.h"
#include "kernels/cuda/check.cuh"

namespace qeval::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockQueries = kWarps * 16;  // 64: 16 rows per warp, one WMMA tile high
constexpr int kTileKeys = 64;               // four WMMA tiles wide
constexpr int kScoreStride = kTileKeys + 4;

struct Params {
  const void* q;
  const void* k;
  std::int64_t qs[3], ks[3];
  std::int64_t batch, heads, kv_heads, length;
  int head_dim, padded;  // padded: head_dim rounded up to a multiple of 16
  bool vector_loads;     // 16-byte loads: head_dim % 8 == 0, pointers and strides aligned
  float scale, softcap;
  std::int64_t window;
  bool softmax_one;
  float* query_stats;
};

__host__ __device__ constexpr int element_stride(int padded) { return padded + 8; }

std::size_t shared_bytes(int padded) {
  return 2u * static_cast<std::size_t>((kBlockQueries + kTileKeys) * element_stride(padded)) +
         sizeof(float) * static_cast<std::size_t>(kBlockQueries * kScoreStride);
}

// rows [first, first + count) of src (row stride `row_stride` elements) into dst [count][stride],
// zero past L and past head_dim.
template <typename T>
__device__ __forceinline__ void load_rows(T* dst, int stride, const T* src, std::int64_t row_stride, std::int64_t first,
                                          int count, const Params& p) {
  if (p.vector_loads) {
    const int chunks = p.padded / 8;  // 8 elements in 16 bytes
    for (int c = threadIdx.x; c < count * chunks; c += kThreads) {
      const int r = c / chunks, d = (c % chunks) * 8;
      const std::int64_t i = first + r;
      uint4 value = make_uint4(0u, 0u, 0u, 0u);
      if (i < p.length && d < p.head_dim) value = *reinterpret_cast<const uint4*>(src + i * row_stride + d);
      *reinterpret_cast<uint4*>(dst + r * stride + d) = value;
    }
  } else {
    for (int c = threadIdx.x; c < count * p.padded; c += kThreads) {
      const int r = c / p.padded, d = c % p.padded;
      const std::int64_t i = first + r;
      dst[r * stride + d] = i < p.length && d < p.head_dim ? src[i * row_stride + d] : detail::from_float<T>(0.0f);
    }
  }
}

// grid (ceil(L / 64), H, B), kThreads threads, shared_bytes(padded) of dynamic shared memory.
template <typename T>
__global__ void __launch_bounds__(kThreads) attention_stats_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // the host side launches this only on compute capability 8.0 or newer
#else
  namespace wmma = nvcuda::wmma;
  extern __shared__ __align__(128) float4 shared4[];  // WMMA wants 256-bit aligned tiles
  const int stride = element_stride(p.padded);
  T* const qs = reinterpret_cast<T*>(shared4);  // [64][stride]
  T* const ks = qs + kBlockQueries * stride;     // [64][stride]
  float* const scores = reinterpret_cast<float*>(ks + kTileKeys * stride);  // [64][kScoreStride]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t L = p.length, b = blockIdx.z, h = blockIdx.y;
  const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.x) * kBlockQueries;
  const std::int64_t hk = h / (p.heads / p.kv_heads);
  const T* const q = static_cast<const T*>(p.q) + b * p.qs[0] + h * p.qs[1];
  const T* const k = static_cast<const T*>(p.k) + b * p.ks[0] + hk * p.ks[1];
  load_rows(qs, stride, q, p.qs[2], q0, kBlockQueries, p);

  // This lane's query row (within the block) and which half of each key tile it sweeps.
  const int r = lane >> 1, half = lane & 1, row = warp * 16 + r;
  const int offset = (r >> 3) + 2 * half;
  const std::int64_t i = q0 + row;
  float* const srow = scores + row * kScoreStride + 32 * half;

  float m = p.softmax_one ? 0.0f : -INFINITY;  // softmax-1: the implicit logit 0 ...
  float l = p.softmax_one ? 1.0f : 0.0f;       // ... with its weight exp(0 − m) in ℓ
  float e_sum = 0.0f, s_sum = 0.0f, first = -INFINITY, top = -INFINITY;
  int tied = 0;

  const std::int64_t q_last = (q0 + kBlockQueries < L ? q0 + kBlockQueries : L) - 1;
  std::int64_t k_begin = p.window > 0 && q0 - p.window + 1 > 0 ? q0 - p.window + 1 : 0;
  k_begin -= k_begin % kTileKeys;
  for (std::int64_t k0 = k_begin; k0 <= q_last; k0 += kTileKeys) {
    __syncthreads();  // every warp is done with the previous k tile (and the q rows are written)
    load_rows(ks, stride, k, p.ks[2], k0, kTileKeys, p);
    __syncthreads();

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kTileKeys / 16];
#pragma unroll
    for (int n = 0; n < kTileKeys / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
    for (int d = 0; d < p.padded; d += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
      wmma::load_matrix_sync(a, qs + warp * 16 * stride + d, stride);
#pragma unroll
      for (int n = 0; n < kTileKeys / 16; ++n) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kt;
        wmma::load_matrix_sync(kt, ks + n * 16 * stride + d, stride);
        wmma::mma_sync(acc[n], a, kt, acc[n]);
      }
    }
    __syncwarp();  // this warp's lanes are done reading its score rows of the previous tile
#pragma unroll
    for (int n = 0; n < kTileKeys / 16; ++n)
      wmma::store_matrix_sync(scores + warp * 16 * kScoreStride + n * 16, acc[n], kScoreStride, wmma::mem_row_major);
    __syncwarp();

    // Sweep 1: logits as the CUDA-core kernel forms them, hidden keys −∞; the pair's maximum.
    float lane_max = -INFINITY;
    int lane_count = 0;
    for (int t = 0; t < 32; ++t) {
      const int c = (t + offset) & 31;
      const std::int64_t j = k0 + 32 * half + c;
      const bool visible = i < L && j <= i && (p.window == 0 || i - j < p.window);
      float x = srow[c] * p.scale;
      if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
      x = visible ? x : -INFINITY;
      srow[c] = x;
      if (x > lane_max) {
        lane_max = x;
        lane_count = 1;
      } else if (x == lane_max) {
        ++lane_count;
      }
    }
    const float other_max = __shfl_xor_sync(0xffffffffu, lane_max, 1);
    const int other_count = __shfl_xor_sync(0xffffffffu, lane_count, 1);
    const float tile_max = fmaxf(lane_max, other_max);
    const int n_max = (lane_max == tile_max ? lane_count : 0) + (other_max == tile_max ? other_count : 0);
    __syncwarp();  // key 1's logit, written by the row's other lane
    if (k0 == 0) first = scores[row * kScoreStride];
    if (tile_max != -INFINITY) {
      if (tile_max > top) {
        top = tile_max;
        tied = n_max;
      } else if (tile_max == top) {
        tied += n_max;
      }
      if (tile_max > m) {
        const float a = expf(m - tile_max);  // 0 when m was −∞
        // Σ e^{s−m'}(s − m') = a (S + (m − m') E): the old terms move with the new maximum.
        s_sum = e_sum > 0.0f ? a * (s_sum + (m - tile_max) * e_sum) : 0.0f;
        l *= a;
        e_sum *= a;
        m = tile_max;
      }
    }
    // Sweep 2: this tile's Σ exp(s − m) and Σ exp(s − m)(s − m) over the visible keys.
    float tile_e = 0.0f, tile_s = 0.0f;
    for (int t = 0; t < 32; ++t) {
      const float x = srow[(t + offset) & 31];
      if (x != -INFINITY) {
        const float e = expf(x - m);
        tile_e += e;
        tile_s += e * (x - m);
      }
    }
    tile_e += __shfl_xor_sync(0xffffffffu, tile_e, 1);  // a + b in one lane, b + a in the other: equal
    tile_s += __shfl_xor_sync(0xffffffffu, tile_s, 1);
    l += tile_e;
    e_sum += tile_e;
    s_sum += tile_s;
  }

  if (i < L && half == 0)
    detail::write_query_stats({m, l, e_sum, s_sum, first, top, tied}, i, p.batch * p.heads * L, (b * p.heads + h) * L + i,
                              p.query_stats);
#endif
}

template <typename T>
void launch(const Params& p, Stream stream) {
  const std::size_t bytes = shared_bytes(p.padded);
  if (bytes > 48 * 1024)
    QEVAL_CUDA_CHECK(cudaFuncSetAttribute(attention_stats_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.length + kBlockQueries - 1) / kBlockQueries), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(p.batch));
  attention_stats_kernel<T><<<grid, kThreads, bytes, stream>>>(p);
  QEVAL_CUDA_CHECK_LAUNCH(attention_stats_kernel);
}

bool device_has_16_bit_mma() {
  int device = 0, major = 0;
  QEVAL_CUDA_CHECK(cudaGetDevice(&device));
  QEVAL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

bool aligned16(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer) % 16 == 0; }

}  // namespace

bool attention_stats_on_tensor_cores(const FusedAttentionArgs& a, Stream stream) {
  if (!a.tensor_cores || a.out != nullptr || a.query_stats == nullptr || a.type == FloatType::f32 ||
      !device_has_16_bit_mma())
    return false;
  Params p{};
  p.q = a.q, p.k = a.k;
  for (int n = 0; n < 3; ++n) p.qs[n] = a.q_strides[n], p.ks[n] = a.k_strides[n];
  p.batch = a.batch, p.heads = a.heads, p.kv_heads = a.kv_heads, p.length = a.length;
  p.head_dim = static_cast<int>(a.head_dim);
  p.padded = static_cast<int>((a.head_dim + 15) / 16 * 16);
  bool strides_whole = true;  // every stride a multiple of 8 elements (16 bytes)
  for (int n = 0; n < 3; ++n) strides_whole = strides_whole && a.q_strides[n] % 8 == 0 && a.k_strides[n] % 8 == 0;
  p.vector_loads = a.head_dim % 8 == 0 && strides_whole && aligned16(a.q) && aligned16(a.k);
  p.scale = a.scale, p.softcap = a.softcap, p.window = a.window, p.softmax_one = a.softmax_one;
  p.query_stats = a.query_stats;
  if (a.type == FloatType::f16)
    launch<__half>(p, stream);
  else
    launch<__nv_bfloat16>(p, stream);
  return true;
}

}  // namespace qeval::kernels::cuda
