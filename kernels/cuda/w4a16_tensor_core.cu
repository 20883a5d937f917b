// The tensor-core W4A16 kernel (kernels/cuda/w4a16_gemm.h), for small M where the op is bound by
// streaming the packed weights: bytes ≈ N·K/2, work ≈ 2·M·N·K.
//
// Roles: y[M, N] = x · Ŵᵀ is computed transposed, yᵀ = Ŵ · xᵀ, so the weights fill the 16-row
// side of mma.sync.m16n8k16 (fp16 × fp16 → fp32) and tokens the 8-column side: for M ≤ 8 no
// tensor-core work is wasted on padded weight rows, and the A operand (weights) never touches
// shared memory.
//
// Thread (g = lane / 4, t = lane % 4) of a warp loads, per 128-k step, 16 bytes of weight rows
// n0+g and n0+g+8 at k ∈ [kb + 32t, kb + 32t + 32) and the same 32 k of x for token g. A dot
// product does not care in which order its k terms are paired, so the k positions of the mma
// fragment are assigned to match what each thread holds:
//   fragment A (16×16, row): thread (g, t) holds columns {2t, 2t+1, 2t+8, 2t+9} of rows g, g+8
//   fragment B (16×8, col):  thread (g, t) holds rows    {2t, 2t+1, 2t+8, 2t+9} of column g
// For word w (k offsets 8w..8w+7 of the thread's 32) two mmas run: the first maps those four
// logical positions to k offsets (0, 4, 1, 5), the second to (2, 6, 3, 7). The pair (p, p+4) is
// what one mask extracts from a word (nibbles at bits 4p and 16+4p), and the same pairs of x come
// from one byte permute each. Both operands use the same map, so the sum is the true dot product.
//
// Nibble → fp16: OR-ing q into the mantissa of 1024.0 (0x6400, ulp 1) gives 1024 + q exactly;
// subtracting 1024 leaves q exactly. The mma forms P = Σ q·x over 128 k in fp32; then per row
// acc += s · (P − z · Σx) in fp32, with Σx over the same 128 k from one more mma with an all-ones
// A. That is exact in (q − z) for any zero point (an fp16 q − z would not be, past 2048).
// The 8 warps of a block split K; shared memory sums their partial results at the end.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/w4a16_launch.cuh"

namespace qeval::kernels::cuda::detail {
namespace {

constexpr int kWarps = 8;      // split-K warps per block
constexpr int kRows = 16;      // output channels per block: the mma's M
constexpr int kKStep = 128;    // k per warp step: 4 threads × 32 weights

__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                             std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// fp16x2 (q at bits 4p..4p+3, q at bits 16+4p..16+4p+3) of a packed word, exactly.
__device__ __forceinline__ std::uint32_t nibble_pair(std::uint32_t word, int p) {
  const std::uint32_t biased = ((word >> (4 * p)) & 0x000F000Fu) | 0x64006400u;  // 1024 + q, twice
  __half2 h = *reinterpret_cast<const __half2*>(&biased);
  h = __hsub2(h, __half2half2(__ushort_as_half(0x6400)));
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

// NT token tiles of 8: grid (ceil(N / 16), ceil(M / (8·NT))), block kWarps × 32.
template <int NT>
__global__ void __launch_bounds__(kWarps * 32)
    w4a16_tensor_core_kernel(const __half* __restrict__ x, const std::uint8_t* __restrict__ qweight,
                             const float* __restrict__ scales, const float* __restrict__ zeros,
                             const float* __restrict__ bias, __half* __restrict__ y, std::int64_t M, std::int64_t N,
                             std::int64_t K, std::int64_t group_size) {
  __shared__ float partial[kWarps - 1][NT][4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kRows;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * 8 * NT;
  // Rows and tokens past the end are clamped for loading (x is zeroed) and skipped when storing.
  const std::int64_t row0 = min(n0 + g, N - 1), row1 = min(n0 + g + 8, N - 1);
  const std::int64_t row_bytes = K / 2, groups = (K + group_size - 1) / group_size;
  const uint4* w0 = reinterpret_cast<const uint4*>(qweight + row0 * row_bytes) + t;
  const uint4* w1 = reinterpret_cast<const uint4*>(qweight + row1 * row_bytes) + t;
  const float* s0 = scales + row0 * groups;
  const float* s1 = scales + row1 * groups;
  const float* z0 = zeros + row0 * groups;
  const float* z1 = zeros + row1 * groups;
  const uint4* xr[NT];
  bool x_valid[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const std::int64_t token = m0 + 8 * j + g;
    x_valid[j] = token < M;
    xr[j] = reinterpret_cast<const uint4*>(x + min(token, M - 1) * K) + 4 * t;
  }

  // fp16x2 (1.0, 1.0) in every register of an A fragment: ones · B sums B's columns.
  const std::uint32_t ones[4] = {0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u};
  float acc[NT][4] = {};
  const int steps = static_cast<int>(K / kKStep);
  // One step ahead: the next 32 bytes per thread are in flight while this step computes.
  uint4 next0 = make_uint4(0, 0, 0, 0), next1 = next0;
  if (warp < steps) next0 = __ldg(w0 + warp * 4), next1 = __ldg(w1 + warp * 4);  // 64 bytes per row per step
  for (int step = warp; step < steps; step += kWarps) {
    const uint4 wq0 = next0, wq1 = next1;
    if (step + kWarps < steps) {
      next0 = __ldg(w0 + (step + kWarps) * 4);
      next1 = __ldg(w1 + (step + kWarps) * 4);
    }
    uint4 xv[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) xv[j][i] = x_valid[j] ? __ldg(xr[j] + step * 16 + i) : make_uint4(0, 0, 0, 0);
    const std::int64_t group = static_cast<std::int64_t>(step) * kKStep / group_size;
    const float sc0 = s0[group], sc1 = s1[group], zp0 = z0[group], zp1 = z1[group];

    // p: Σ q·x. xs: Σ x, from the same B fragments times an all-ones A, so it lands in the
    // accumulator layout already (columns = tokens) and costs tensor-core work, not ALU work.
    float p[NT][4] = {}, xs[NT][4] = {};
    const std::uint32_t wa[4] = {wq0.x, wq0.y, wq0.z, wq0.w};
    const std::uint32_t wb[4] = {wq1.x, wq1.y, wq1.z, wq1.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      // Registers in mma order: {row g, row g+8} × {first pair, second pair}.
      const std::uint32_t a_first[4] = {nibble_pair(wa[w], 0), nibble_pair(wb[w], 0), nibble_pair(wa[w], 1),
                                        nibble_pair(wb[w], 1)};  // k offsets (0,4) and (1,5)
      const std::uint32_t a_second[4] = {nibble_pair(wa[w], 2), nibble_pair(wb[w], 2), nibble_pair(wa[w], 3),
                                         nibble_pair(wb[w], 3)};  // k offsets (2,6) and (3,7)
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint4 v = xv[j][w];  // x at k offsets 0..7: v.x = (0,1), v.y = (2,3), v.z = (4,5), v.w = (6,7)
        const std::uint32_t b_first0 = __byte_perm(v.x, v.z, 0x5410), b_first1 = __byte_perm(v.x, v.z, 0x7632);
        const std::uint32_t b_second0 = __byte_perm(v.y, v.w, 0x5410), b_second1 = __byte_perm(v.y, v.w, 0x7632);
        mma_m16n8k16(p[j], a_first, b_first0, b_first1);
        mma_m16n8k16(xs[j], ones, b_first0, b_first1);
        mma_m16n8k16(p[j], a_second, b_second0, b_second1);
        mma_m16n8k16(xs[j], ones, b_second0, b_second1);
      }
    }
    // Accumulator element i: row g (+8 for i ≥ 2), token 2t (+1 for odd i); xs[j][i] is that
    // token's Σ x over the 128 k (the same for both rows).
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      acc[j][0] = fmaf(sc0, fmaf(-zp0, xs[j][0], p[j][0]), acc[j][0]);
      acc[j][1] = fmaf(sc0, fmaf(-zp0, xs[j][1], p[j][1]), acc[j][1]);
      acc[j][2] = fmaf(sc1, fmaf(-zp1, xs[j][2], p[j][2]), acc[j][2]);
      acc[j][3] = fmaf(sc1, fmaf(-zp1, xs[j][3], p[j][3]), acc[j][3]);
    }
  }

  if (warp > 0) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp - 1][j][i][lane] = acc[j][i];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v = acc[j][i];
#pragma unroll
      for (int w = 0; w < kWarps - 1; ++w) v += partial[w][j][i][lane];
      // Accumulator element i: row g (+8 for i ≥ 2), token 2t (+1 for odd i).
      const std::int64_t row = n0 + g + (i >= 2 ? 8 : 0);
      const std::int64_t token = m0 + 8 * j + 2 * t + (i & 1);
      if (row < N && token < M) y[token * N + row] = __float2half_rn(bias ? v + bias[row] : v);
    }
  }
}

}  // namespace

void launch_w4a16_tensor_core(const W4A16Args& a, Stream stream) {
  const std::int64_t row_blocks = (a.n + kRows - 1) / kRows;
  QEVAL_CUDA_EXPECT(row_blocks < (std::int64_t{1} << 31), "w4a16 tensor core: N too large");
  const auto* x = static_cast<const __half*>(a.x);
  auto* y = static_cast<__half*>(a.y);
  if (a.m <= 8) {
    const dim3 grid(static_cast<unsigned>(row_blocks), 1);
    w4a16_tensor_core_kernel<1><<<grid, kWarps * 32, 0, stream>>>(x, a.qweight, a.scales, a.zeros, a.bias, y, a.m,
                                                                   a.n, a.k, a.group_size);
  } else {
    const std::int64_t token_blocks = (a.m + 15) / 16;
    QEVAL_CUDA_EXPECT(token_blocks <= 65535, "w4a16 tensor core: M too large for one launch");
    const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(token_blocks));
    w4a16_tensor_core_kernel<2><<<grid, kWarps * 32, 0, stream>>>(x, a.qweight, a.scales, a.zeros, a.bias, y, a.m,
                                                                   a.n, a.k, a.group_size);
  }
  QEVAL_CUDA_CHECK_LAUNCH(w4a16_tensor_core_kernel);
}

}  // namespace qeval::kernels::cuda::detail
