// Fused causal attention with statistics, and the hidden-state statistics in one read
// (kernels/cuda/fused_attention_stats.h states what is computed; this file how).
//
// Statistics only (out = nullptr): the same pass without v and without the product (what the
// model runs: its output then comes from the same kernel as without statistics, so turning
// statistics on changes no bit of it). In half and bfloat16 that pass runs on tensor cores
// (attention_stats_tensor_cores.cu); the kernel below serves float32 and passes with an output.
//
// Attention: one block of 8 warps per (32 queries, head, batch row); each warp owns 4 queries.
// The block's q rows sit in shared memory as float; tiles of 32 keys (k and v, widened to float)
// follow in shared memory. Scores: lane j of a warp computes key j's logit for its warp's 4
// queries (its k row read once as float4s, the q rows broadcast), so a warp-wide max / sum over
// lanes is the tile's reduction over keys. The online softmax state of a query (m, ℓ, E, S, the
// largest real logit and how many keys share it) is the same in every lane. Product with v: lane
// owns channels lane + 32t (t < NT), the weights are broadcast by shuffles. Rows of k are padded
// by 4 floats so that the lanes' float4 reads of 32 different rows hit distinct banks (row
// stride hd/4 + 1 16-byte units, odd when hd is a multiple of 8).
//
// Reductions of the statistics: per query in float32 here, then [B, H, 4] float64 sums in a
// second launch with one block per (b, h) summing in a fixed order, so results never depend on
// the batch or on scheduling.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/absmax.cuh"
#include "kernels/cuda/attention_query_stats.cuh"
#include "kernels/cuda/attention_stats_tensor_cores.h"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/fused_attention_stats.h"

namespace qeval::kernels::cuda {
namespace detail {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kQueriesPerWarp = 4;
constexpr int kBlockQueries = kWarps * kQueriesPerWarp;  // 32
constexpr int kTileKeys = 32;                            // one key per lane
constexpr int kReduceThreads = 256;

struct AttentionParams {
  const void* q;
  const void* k;
  const void* v;
  std::int64_t qs[3], ks[3], vs[3];
  void* out;
  std::int64_t batch, heads, kv_heads, length;
  int head_dim, padded;  // padded: head_dim rounded up to a multiple of 4
  float scale, softcap;
  std::int64_t window;
  bool softmax_one;
  float* query_stats;
};

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

std::size_t attention_shared_bytes(int padded) {
  // q rows and k rows padded by 4 floats; v rows unpadded (read along channels).
  return sizeof(float) * static_cast<std::size_t>((kBlockQueries + kTileKeys) * (padded + 4) + kTileKeys * padded);
}

// grid (ceil(L / 32), H, B), kThreads threads, attention_shared_bytes(padded) of dynamic shared memory.
template <typename T, int NT>
__global__ void __launch_bounds__(kThreads) fused_attention_kernel(const AttentionParams p) {
  extern __shared__ float4 shared4[];
  float* const shared = reinterpret_cast<float*>(shared4);
  const int hd = p.head_dim, padded = p.padded, stride = padded + 4;
  float* const qs = shared;                      // [32][stride]
  float* const ks = qs + kBlockQueries * stride;  // [32][stride]
  float* const vs = ks + kTileKeys * stride;      // [32][padded]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t L = p.length, b = blockIdx.z, h = blockIdx.y;
  const std::int64_t q0 = static_cast<std::int64_t>(blockIdx.x) * kBlockQueries;
  const std::int64_t hk = h / (p.heads / p.kv_heads);
  const T* const q = static_cast<const T*>(p.q) + b * p.qs[0] + h * p.qs[1];
  const T* const k = static_cast<const T*>(p.k) + b * p.ks[0] + hk * p.ks[1];
  const T* const v = static_cast<const T*>(p.v) + b * p.vs[0] + hk * p.vs[1];

  for (int r = warp; r < kBlockQueries; r += kWarps) {
    const std::int64_t i = q0 + r;
    for (int d = lane; d < padded; d += 32) qs[r * stride + d] = i < L && d < hd ? to_float(q[i * p.qs[2] + d]) : 0.0f;
  }

  // Online state of this warp's queries (identical in every lane).
  float m[kQueriesPerWarp], l[kQueriesPerWarp], e_sum[kQueriesPerWarp], s_sum[kQueriesPerWarp];
  float first[kQueriesPerWarp], top[kQueriesPerWarp];
  int tied[kQueriesPerWarp];
  float acc[kQueriesPerWarp][NT];
#pragma unroll
  for (int r = 0; r < kQueriesPerWarp; ++r) {
    m[r] = p.softmax_one ? 0.0f : -INFINITY;  // softmax-1: the implicit logit 0 ...
    l[r] = p.softmax_one ? 1.0f : 0.0f;       // ... with its weight exp(0 − m) in ℓ
    e_sum[r] = s_sum[r] = 0.0f;
    first[r] = top[r] = -INFINITY;
    tied[r] = 0;
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
  }

  const std::int64_t q_last = (q0 + kBlockQueries < L ? q0 + kBlockQueries : L) - 1;
  std::int64_t k_begin = p.window > 0 && q0 - p.window + 1 > 0 ? q0 - p.window + 1 : 0;
  k_begin -= k_begin % kTileKeys;
  for (std::int64_t k0 = k_begin; k0 <= q_last; k0 += kTileKeys) {
    __syncthreads();  // every warp is done with the previous tile (and the q rows are written)
    for (int r = warp; r < kTileKeys; r += kWarps) {
      const std::int64_t j = k0 + r;
      for (int d = lane; d < padded; d += 32) {
        const bool in = j < L && d < hd;
        ks[r * stride + d] = in ? to_float(k[j * p.ks[2] + d]) : 0.0f;
        if (p.out != nullptr) vs[r * padded + d] = in ? to_float(v[j * p.vs[2] + d]) : 0.0f;
      }
    }
    __syncthreads();

    // Logits of key k0 + lane for the warp's queries.
    float s[kQueriesPerWarp];
#pragma unroll
    for (int r = 0; r < kQueriesPerWarp; ++r) s[r] = 0.0f;
    const float* const krow = ks + lane * stride;
    const float* const qrow = qs + warp * kQueriesPerWarp * stride;
    for (int d = 0; d < padded; d += 4) {
      const float4 kv = *reinterpret_cast<const float4*>(krow + d);
#pragma unroll
      for (int r = 0; r < kQueriesPerWarp; ++r) {
        const float4 qv = *reinterpret_cast<const float4*>(qrow + r * stride + d);
        s[r] = fmaf(qv.x, kv.x, s[r]);
        s[r] = fmaf(qv.y, kv.y, s[r]);
        s[r] = fmaf(qv.z, kv.z, s[r]);
        s[r] = fmaf(qv.w, kv.w, s[r]);
      }
    }

    float weight[kQueriesPerWarp];  // exp(s − m) of key k0 + lane, 0 where hidden
    const std::int64_t j = k0 + lane;
#pragma unroll
    for (int r = 0; r < kQueriesPerWarp; ++r) {
      const std::int64_t i = q0 + warp * kQueriesPerWarp + r;
      const bool visible = i < L && j <= i && (p.window == 0 || i - j < p.window);
      float x = s[r] * p.scale;
      if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
      x = visible ? x : -INFINITY;
      if (k0 == 0) first[r] = __shfl_sync(0xffffffffu, x, 0);
      weight[r] = 0.0f;
      const float tile_max = warp_max(x);
      if (tile_max == -INFINITY) continue;  // nothing visible to this query here (warp-uniform)
      const int n_max = __popc(__ballot_sync(0xffffffffu, x == tile_max));
      if (tile_max > top[r]) {
        top[r] = tile_max;
        tied[r] = n_max;
      } else if (tile_max == top[r]) {
        tied[r] += n_max;
      }
      if (tile_max > m[r]) {
        const float a = expf(m[r] - tile_max);  // 0 when m was −∞
        // Σ e^{s−m'}(s − m') = a (S + (m − m') E): the old terms move with the new maximum.
        s_sum[r] = e_sum[r] > 0.0f ? a * (s_sum[r] + (m[r] - tile_max) * e_sum[r]) : 0.0f;
        l[r] *= a;
        e_sum[r] *= a;
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] *= a;
        m[r] = tile_max;
      }
      const float e = expf(x - m[r]);  // exp(−∞) = 0 where hidden
      const float tile_e = warp_sum(e), tile_s = warp_sum(visible ? e * (x - m[r]) : 0.0f);
      l[r] += tile_e;
      e_sum[r] += tile_e;
      s_sum[r] += tile_s;
      weight[r] = e;
    }

    // Σ_j weight_j v_j into the channels lane + 32t (not when only the statistics are asked for).
    const int last_key = p.out == nullptr ? 0 : L - k0 < kTileKeys ? static_cast<int>(L - k0) : kTileKeys;
    for (int jj = 0; jj < last_key; ++jj) {
      float w[kQueriesPerWarp];
#pragma unroll
      for (int r = 0; r < kQueriesPerWarp; ++r) w[r] = __shfl_sync(0xffffffffu, weight[r], jj);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const int d = lane + 32 * t;
        const float vv = d < padded ? vs[jj * padded + d] : 0.0f;
#pragma unroll
        for (int r = 0; r < kQueriesPerWarp; ++r) acc[r][t] = fmaf(w[r], vv, acc[r][t]);
      }
    }
  }

  T* const out = static_cast<T*>(p.out);
#pragma unroll
  for (int r = 0; r < kQueriesPerWarp; ++r) {
    const std::int64_t i = q0 + warp * kQueriesPerWarp + r;
    if (i >= L) continue;
    if (out != nullptr) {
      const float inv = 1.0f / l[r];
      T* const o = out + ((b * L + i) * p.heads + h) * hd;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const int d = lane + 32 * t;
        if (d < hd) o[d] = from_float<T>(acc[r][t] * inv);
      }
    }
    if (p.query_stats != nullptr && lane == 0)
      write_query_stats({m[r], l[r], e_sum[r], s_sum[r], first[r], top[r], tied[r]}, i, p.batch * p.heads * L,
                        (b * p.heads + h) * L + i, p.query_stats);
  }
}

// Fixed-order block sum of N doubles (every thread gets the result); scratch: kReduceThreads / 32 × N.
template <int N>
__device__ void block_sum(double (&v)[N], double* scratch) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[n] += __shfl_xor_sync(0xffffffffu, v[n], o);
  __syncthreads();  // scratch free from an earlier use
  if (lane == 0)
#pragma unroll
    for (int n = 0; n < N; ++n) scratch[warp * N + n] = v[n];
  __syncthreads();
#pragma unroll
  for (int n = 0; n < N; ++n) {
    v[n] = 0.0;
    for (int w = 0; w < warps; ++w) v[n] += scratch[w * N + n];
  }
}

// grid B·H: the four per-(b, h) sums of the header, from query_stats [3, B·H, L].
__global__ void __launch_bounds__(kReduceThreads)
    head_sums_kernel(const float* __restrict__ stats, std::int64_t BH, std::int64_t L, std::int64_t reach,
                     std::int64_t sink_T, double* __restrict__ sums) {
  __shared__ double scratch[kReduceThreads / 32 * 4];
  const std::int64_t bh = blockIdx.x;
  const float* const p1 = stats + bh * L;
  const float* const credit = stats + (BH + bh) * L;
  const float* const entropy = stats + (2 * BH + bh) * L;
  double v[4] = {0.0, 0.0, 0.0, 0.0};
  for (std::int64_t i = threadIdx.x; i < L; i += kReduceThreads) {
    if (i < sink_T) v[0] += p1[i];
    if (i >= 1 && i < reach) {
      v[1] += p1[i];
      v[2] += credit[i];
    }
    v[3] += entropy[i];
  }
  block_sum(v, scratch);
  if (threadIdx.x == 0)
    for (int n = 0; n < 4; ++n) sums[bh * 4 + n] = v[n];
}

// ---- hidden-state statistics ----

// grid N rows, kReduceThreads threads, D floats of dynamic shared memory. rows: [5, N] float64 =
// kurtosis, max|x|, max|x| / ‖x‖₂, the signed value at the max, its channel.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    hidden_rows_kernel(const T* __restrict__ x, std::int64_t N, std::int64_t D, double* __restrict__ rows) {
  extern __shared__ float4 row4[];
  float* const row = reinterpret_cast<float*>(row4);
  __shared__ double scratch[kReduceThreads / 32 * 3];
  __shared__ float best_abs[kReduceThreads / 32];
  __shared__ std::int64_t best_channel[kReduceThreads / 32];
  const std::int64_t n = blockIdx.x;
  const T* const xr = x + n * D;
  double sum[1] = {0.0};
  float amax = -1.0f;
  std::int64_t channel = 0;
  for (std::int64_t d = threadIdx.x; d < D; d += kReduceThreads) {
    const float f = to_float(xr[d]);
    row[d] = f;
    sum[0] += f;
    if (fabsf(f) > amax) {  // ascending d: a thread keeps its lowest maximal channel
      amax = fabsf(f);
      channel = d;
    }
  }
  // Largest |x|, lowest channel on ties: warp shuffles, then the warps' winners in order.
  for (int o = 16; o > 0; o >>= 1) {
    const float a = __shfl_xor_sync(0xffffffffu, amax, o);
    const std::int64_t c = __shfl_xor_sync(0xffffffffu, channel, o);
    if (a > amax || (a == amax && c < channel)) {
      amax = a;
      channel = c;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    best_abs[warp] = amax;
    best_channel[warp] = channel;
  }
  block_sum(sum, scratch);  // its barriers also publish best_* and row
  for (int w = 0; w < kReduceThreads / 32; ++w)
    if (best_abs[w] > amax || (best_abs[w] == amax && best_channel[w] < channel)) {
      amax = best_abs[w];
      channel = best_channel[w];
    }
  const double mean = sum[0] / static_cast<double>(D);
  double moments[3] = {0.0, 0.0, 0.0};  // Σ (x − μ)², Σ (x − μ)⁴, Σ x²
  for (std::int64_t d = threadIdx.x; d < D; d += kReduceThreads) {
    const double xd = row[d], c = xd - mean, c2 = c * c;
    moments[0] += c2;
    moments[1] += c2 * c2;
    moments[2] += xd * xd;
  }
  block_sum(moments, scratch);
  if (threadIdx.x == 0) {
    const double m2 = moments[0] / static_cast<double>(D), m4 = moments[1] / static_cast<double>(D);
    rows[n] = m4 / (m2 * m2);
    rows[N + n] = amax;
    rows[2 * N + n] = static_cast<double>(amax) / sqrt(moments[2]);
    rows[3 * N + n] = row[channel];
    rows[4 * N + n] = static_cast<double>(channel);
  }
}

// grid B: the nine HiddenLayerStats fields of each sequence of L rows.
__global__ void __launch_bounds__(kReduceThreads)
    hidden_sequences_kernel(const double* __restrict__ rows, std::int64_t N, std::int64_t L, double* __restrict__ out) {
  __shared__ double scratch[kReduceThreads / 32 * 3];
  __shared__ double best_value[kReduceThreads];
  __shared__ std::int64_t best_position[kReduceThreads];
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * L;
  double rest[3] = {0.0, 0.0, 0.0};
  double value = -1.0;
  std::int64_t position = 0;
  for (std::int64_t l = threadIdx.x; l < L; l += kReduceThreads) {
    if (l >= 1)
      for (int k = 0; k < 3; ++k) rest[k] += rows[k * N + base + l];
    const double a = rows[N + base + l];
    if (a > value) {  // ascending l: the earliest maximal position
      value = a;
      position = l;
    }
  }
  best_value[threadIdx.x] = value;
  best_position[threadIdx.x] = position;
  block_sum(rest, scratch);
  if (threadIdx.x == 0) {
    for (int t = 1; t < kReduceThreads; ++t)
      if (best_value[t] > value || (best_value[t] == value && best_position[t] < position)) {
        value = best_value[t];
        position = best_position[t];
      }
    const double nan = __longlong_as_double(0x7ff8000000000000LL);
    double* const o = out + blockIdx.x * 9;
    for (int k = 0; k < 3; ++k) {
      o[2 * k] = rows[k * N + base];
      o[2 * k + 1] = L > 1 ? rest[k] / static_cast<double>(L - 1) : nan;
    }
    o[6] = rows[3 * N + base + position];
    o[7] = rows[4 * N + base + position];
    o[8] = static_cast<double>(position);
  }
}

template <typename T, int NT>
void launch_attention(const AttentionParams& p, Stream stream) {
  const std::size_t bytes = attention_shared_bytes(p.padded);
  if (bytes > 48 * 1024)
    QEVAL_CUDA_CHECK(cudaFuncSetAttribute(fused_attention_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.length + kBlockQueries - 1) / kBlockQueries), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(p.batch));
  fused_attention_kernel<T, NT><<<grid, kThreads, bytes, stream>>>(p);
  QEVAL_CUDA_CHECK_LAUNCH(fused_attention_kernel);
}

template <typename T>
void launch_attention_for_width(const AttentionParams& p, Stream stream) {
  if (p.padded <= 32)
    launch_attention<T, 1>(p, stream);
  else if (p.padded <= 64)
    launch_attention<T, 2>(p, stream);
  else if (p.padded <= 128)
    launch_attention<T, 4>(p, stream);
  else
    launch_attention<T, 8>(p, stream);
}

template <typename T>
void launch_hidden_rows(const void* x, std::int64_t N, std::int64_t D, double* rows, Stream stream) {
  const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(D);
  if (bytes > 48 * 1024)
    QEVAL_CUDA_CHECK(cudaFuncSetAttribute(hidden_rows_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
  hidden_rows_kernel<T><<<static_cast<unsigned>(N), kReduceThreads, bytes, stream>>>(static_cast<const T*>(x), N, D, rows);
  QEVAL_CUDA_CHECK_LAUNCH(hidden_rows_kernel);
}

}  // namespace
}  // namespace detail

const char* fused_attention_unsupported_reason(const FusedAttentionArgs& a) {
  if (a.head_dim < 1 || a.head_dim > kFusedAttentionMaxHeadDim) return "head size outside 1..256";
  if (a.batch < 1 || a.heads < 1 || a.kv_heads < 1 || a.length < 1) return "empty shape";
  if (a.heads % a.kv_heads != 0) return "query heads not a multiple of the kv heads";
  if (a.heads > 65535 || a.batch > 65535) return "more than 65535 heads or batch rows";
  if (a.window < 0 || a.stats_window < 0) return "negative window";
  if (a.head_sums != nullptr && a.query_stats == nullptr) return "head sums need the per-query statistics buffer";
  if (a.sink_T < 1) return "sink T below 1";
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr) return "null pointer";
  if (a.out == nullptr && a.query_stats == nullptr) return "neither output nor statistics asked for";
  return "";
}

void fused_attention(const FusedAttentionArgs& a, Stream stream) {
  const char* why = fused_attention_unsupported_reason(a);
  QEVAL_CUDA_EXPECT(why[0] == '\0', std::string("fused_attention: ") + why);
  detail::AttentionParams p{};
  p.q = a.q, p.k = a.k, p.v = a.v, p.out = a.out;
  for (int n = 0; n < 3; ++n) p.qs[n] = a.q_strides[n], p.ks[n] = a.k_strides[n], p.vs[n] = a.v_strides[n];
  p.batch = a.batch, p.heads = a.heads, p.kv_heads = a.kv_heads, p.length = a.length;
  p.head_dim = static_cast<int>(a.head_dim);
  p.padded = static_cast<int>((a.head_dim + 3) / 4 * 4);
  p.scale = a.scale, p.softcap = a.softcap, p.window = a.window, p.softmax_one = a.softmax_one;
  p.query_stats = a.query_stats;
  // Statistics alone in 16 bits: the logits on tensor cores (kernels/cuda/attention_stats_tensor_cores.h).
  if (!attention_stats_on_tensor_cores(a, stream)) {
    switch (a.type) {
      case FloatType::f32: detail::launch_attention_for_width<float>(p, stream); break;
      case FloatType::f16: detail::launch_attention_for_width<__half>(p, stream); break;
      case FloatType::bf16: detail::launch_attention_for_width<__nv_bfloat16>(p, stream); break;
    }
  }
  if (a.head_sums != nullptr) {
    const std::int64_t BH = a.batch * a.heads;
    const std::int64_t reach = a.stats_window > 0 ? std::min(a.length, a.stats_window) : a.length;
    detail::head_sums_kernel<<<static_cast<unsigned>(BH), detail::kReduceThreads, 0, stream>>>(
        a.query_stats, BH, a.length, reach, std::min(a.sink_T, reach), a.head_sums);
    QEVAL_CUDA_CHECK_LAUNCH(head_sums_kernel);
  }
}

void hidden_stats(const void* x, FloatType type, std::int64_t batch, std::int64_t length, std::int64_t channels,
                  double* row_scratch, double* sequence_stats, Stream stream) {
  QEVAL_CUDA_EXPECT(batch >= 1 && length >= 1 && channels >= 1 && channels <= kHiddenStatsMaxChannels,
                    "hidden_stats: needs B, L ≥ 1 and 1 ≤ D ≤ " + std::to_string(kHiddenStatsMaxChannels) + ", got B " +
                        std::to_string(batch) + ", L " + std::to_string(length) + ", D " + std::to_string(channels));
  const std::int64_t N = batch * length;
  switch (type) {
    case FloatType::f32: detail::launch_hidden_rows<float>(x, N, channels, row_scratch, stream); break;
    case FloatType::f16: detail::launch_hidden_rows<__half>(x, N, channels, row_scratch, stream); break;
    case FloatType::bf16: detail::launch_hidden_rows<__nv_bfloat16>(x, N, channels, row_scratch, stream); break;
  }
  detail::hidden_sequences_kernel<<<static_cast<unsigned>(batch), detail::kReduceThreads, 0, stream>>>(row_scratch, N, length,
                                                                                                       sequence_stats);
  QEVAL_CUDA_CHECK_LAUNCH(hidden_sequences_kernel);
}

}  // namespace qeval::kernels::cuda
