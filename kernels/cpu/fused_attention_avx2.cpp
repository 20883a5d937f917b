// Fused causal attention for x86-64 CPUs with AVX2 and FMA (kernels/cpu/fused_attention_cpu.h).
//
// Why it exists: model/causal_attention_cpu.cpp computes each block of 64 queries against the keys
// it can see with LibTorch ops: a BLAS call for the scores, a scale, a mask, a softmax, a BLAS call
// for the product with v. Per layer of SmolLM2-135M at L = 512 that is 72 blocks × 7 ops, and
// OpenBLAS zero-fills and repacks every small output and operand; perf put its packing and
// zeroing (sgemm_oncopy, sgemm_beta) at a third of its GEMM kernel's samples there, and the whole
// attention ran at about a third of the fp32 GEMM's peak. Here one thread takes a block of queries
// through all of it: scores from an FMA micro-kernel, the softmax in a per-thread buffer of 64 rows,
// and the product with v read straight from the tensor.
//
// Per work item (batch b, head h, block of 64 queries [r0, r0 + rows)), in tiles of 6 queries:
//   1. scores s[i][j] = scale · q_i · k_j for the keys of the block, 6 queries × 16 keys at a time
//      (12 ymm accumulators, an FMA micro-kernel over hd). kᵀ is packed once per kv head into panels
//      of 16 keys ([panel][d][16]), shared by every query block and every head of its group. Key
//      panels are the outer loop, so a panel serves all the block's tiles from L1; tiles wholly
//      above the diagonal or before the window are not computed.
//   2. per query, over exactly the keys it sees: the row max m, e = exp(s - m) in place, Σ e; the
//      entries of its tile's key range it does not see are set to 0.
//   3. o_i = Σ_j e_ij v_j, 6 queries × 16 channels at a time, v read in place, in chunks of 128 keys
//      as the outer loop (a chunk of v serves all tiles from L1/L2; partial sums wait in a buffer);
//      then out_i = o_i / Σ_j e_ij. When the probabilities are wanted (attention statistics),
//      e_ij / Σ_j e_ij is written out too; the output does not depend on whether they are.
// With the tile loops innermost instead, every tile streamed all of kᵀ and v (512 KiB a head at
// L = 2,048) from L3, and the kernel ran at two thirds of the fp32 GEMM's rate; now it runs at about
// its rate (bench/attention_bench).
//
// Softmax-1 takes m = max(row max, 0) and divides by e^-m + Σ e, as model/transformer.cpp's
// softmax1. exp is the Cephes single-precision polynomial (about 1 ulp; below e^-87.3, under
// float's normal range, it gives 0). Every output is computed by one thread in one fixed order, so
// the bits do not depend on the number of threads. Functions carry __attribute__((target)) rather
// than the build using -mavx2 -mfma, so the binary still runs on any x86-64.
#include "kernels/cpu/fused_attention_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QEVAL_ATTENTION_HAS_AVX2_VARIANT 1
#define QEVAL_AVX2_FMA __attribute__((target("avx2,fma")))
#endif

namespace qeval::kernels::cpu {

bool avx2_fused_attention_available() {
#ifdef QEVAL_ATTENTION_HAS_AVX2_VARIANT
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

bool fused_causal_attention_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  auto cpu_float4 = [](const at::Tensor& t) { return t.dim() == 4 && t.device().is_cpu() && t.scalar_type() == at::kFloat; };
  if (!cpu_float4(q) || !cpu_float4(k) || !cpu_float4(v) || k.sizes() != v.sizes()) return false;
  const std::int64_t H = q.size(1), Hkv = k.size(1), hd = q.size(3);
  return k.size(0) == q.size(0) && Hkv > 0 && H % Hkv == 0 && k.size(2) == q.size(2) && k.size(3) == hd && hd > 0 &&
         hd % 8 == 0;
}

#ifdef QEVAL_ATTENTION_HAS_AVX2_VARIANT
namespace {

constexpr std::int64_t kQueryBlock = 64;  // queries per work item, as model/causal_attention_cpu.cpp's blocks
constexpr std::int64_t kMr = 6;           // queries per micro-tile (6 × 2 accumulators + 2 operands + 1 broadcast)
constexpr std::int64_t kKeys = 16;        // keys per packed panel of kᵀ and per score micro-tile
constexpr std::int64_t kValueKeys = 128;  // keys of v per chunk of the product e · v (32 KiB at hd = 64)

std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// e^x, lane by lane: Cephes' expf (range reduction by n = round(x · log2 e) in two parts of ln 2, a
// degree-5 polynomial, 2^n through the exponent field). Inputs here are ≤ 0; below -87.3 the result
// is 0. NaN stays NaN (max and min take x second, and x < lo is false for NaN).
QEVAL_AVX2_FMA inline __m256 exp_ps(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3365478515625f), hi = _mm256_set1_ps(88.3762626647949f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(two_n)));
}

// The 8 lanes' sum in a fixed order.
QEVAL_AVX2_FMA inline float lane_sum(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Lanes [0, n) of 8 set, for masked loads and stores of a row's tail.
QEVAL_AVX2_FMA inline __m256i first_lanes(std::int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// kᵀ of keys [0, L) of one kv head (rows `stride` floats apart) as panels of 16 keys:
// dst[p][d][j] = k[16p + j][d], zeros past L.
void pack_keys(const float* k, std::int64_t stride, std::int64_t L, std::int64_t hd, float* dst) {
  const std::int64_t panels = round_up(L, kKeys) / kKeys;
  for (std::int64_t p = 0; p < panels; ++p)
    for (std::int64_t j = 0; j < kKeys; ++j) {
      const std::int64_t key = p * kKeys + j;
      float* d = dst + p * hd * kKeys + j;
      if (key < L) {
        const float* src = k + key * stride;
        for (std::int64_t c = 0; c < hd; ++c) d[c * kKeys] = src[c];
      } else {
        for (std::int64_t c = 0; c < hd; ++c) d[c * kKeys] = 0.0f;
      }
    }
}

// y[0, n) = x[0, n) / d.
QEVAL_AVX2_FMA void divide_row(const float* x, std::int64_t n, float d, float* y) {
  const __m256 dv = _mm256_set1_ps(d);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_div_ps(_mm256_loadu_ps(x + i), dv));
  if (i < n) {
    const __m256i mask = first_lanes(n - i);
    _mm256_maskstore_ps(y + i, mask, _mm256_div_ps(_mm256_maskload_ps(x + i, mask), dv));
  }
}

// The largest of x[0, n), n ≥ 1.
QEVAL_AVX2_FMA float row_max(const float* x, std::int64_t n) {
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float best = -std::numeric_limits<float>::infinity();
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  for (float l : lanes) best = std::max(best, l);
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

// x[i] = e^(x[i] - m) in place over [0, n); returns their sum.
QEVAL_AVX2_FMA float exp_row(float* x, std::int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (i < n) {
    const __m256i mask = first_lanes(n - i);
    const __m256 e = _mm256_and_ps(exp_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), mv)), _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(x + i, mask, e);
    sum = _mm256_add_ps(sum, e);
  }
  return lane_sum(sum);
}

// out[r][0, 8·NV) = init[r][0, 8·NV) + Σ_{c < n} a[r][c] · b[c][0, 8·NV) for rows r < rows, NV = 1
// or 2, summed in the order of c; init null: from 0. a[r]: row pointers (rows past `rows` repeat a
// valid row and are not stored); b's rows `b_stride` floats apart; init and out `out_stride` apart
// (init may be out). The micro-kernel of both products: scores (a = queries, b = packed kᵀ) and e · v
// (a = exponentials, b = v, init = the partial sums of earlier chunks). The accumulators are named
// variables, with the asm barrier the int8 kernel uses: held in an array, GCC stored them to the
// stack on every step.
template <int NV>
QEVAL_AVX2_FMA void fma_tile(const float* const a[kMr], const float* b, std::int64_t b_stride, std::int64_t n,
                             const float* init, float* out, std::int64_t out_stride, std::int64_t rows) {
  static_assert(NV == 1 || NV == 2, "one or two vectors of 8 channels");
#define start(r, j) \
  (init != nullptr && (r) < rows ? _mm256_loadu_ps(init + (r) * out_stride + 8 * (j)) : _mm256_setzero_ps())
  __m256 c00 = start(0, 0), c10 = start(1, 0), c20 = start(2, 0), c30 = start(3, 0), c40 = start(4, 0),
         c50 = start(5, 0);
  __m256 c01 = _mm256_setzero_ps(), c11 = c01, c21 = c01, c31 = c01, c41 = c01, c51 = c01;
  if (NV == 2) c01 = start(0, 1), c11 = start(1, 1), c21 = start(2, 1), c31 = start(3, 1), c41 = start(4, 1), c51 = start(5, 1);
#undef start
  for (std::int64_t c = 0; c < n; ++c) {
    const __m256 b0 = _mm256_loadu_ps(b + c * b_stride);
    const __m256 b1 = NV == 2 ? _mm256_loadu_ps(b + c * b_stride + 8) : b0;
    __m256 x;
#define QEVAL_ROW(r)                                        \
  x = _mm256_broadcast_ss(a[r] + c);                        \
  c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0);                 \
  if (NV == 2) c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1);
    QEVAL_ROW(0)
    QEVAL_ROW(1)
    QEVAL_ROW(2)
    QEVAL_ROW(3)
    QEVAL_ROW(4)
    QEVAL_ROW(5)
#undef QEVAL_ROW
    asm("" : "+x"(c00), "+x"(c01), "+x"(c10), "+x"(c11), "+x"(c20), "+x"(c21), "+x"(c30), "+x"(c31), "+x"(c40),
        "+x"(c41), "+x"(c50), "+x"(c51));  // keeps the accumulators in registers
  }
  const __m256 sums[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (std::int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < NV; ++j) _mm256_storeu_ps(out + r * out_stride + 8 * j, sums[r][j]);
}

// x[r][0, 16) *= scale for rows r < rows, `stride` floats apart: the scores' scale, applied to the
// finished sum as LibTorch's path applies it to the product.
QEVAL_AVX2_FMA void scale_tile(float* x, std::int64_t stride, std::int64_t rows, float scale) {
  const __m256 sc = _mm256_set1_ps(scale);
  for (std::int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < 2; ++j) _mm256_storeu_ps(x + r * stride + 8 * j, _mm256_mul_ps(_mm256_loadu_ps(x + r * stride + 8 * j), sc));
}

struct Problem {
  const float *q, *k_packed, *v;
  std::int64_t q_stride[3], v_stride[3];  // batch, head, position (the channel stride is 1)
  std::int64_t H, group, L, hd, window, panels;
  float scale;
  bool softmax_one;
  float* out;    // [B, L, H·hd]
  float* probs;  // [B, H, L, L], zero-filled, or null
};

// The first key query i sees.
std::int64_t first_key(const Problem& p, std::int64_t i) {
  return p.window > 0 ? std::max<std::int64_t>(0, i - p.window + 1) : 0;
}

// A block's query tiles: queries [first, last] of the block, keys [lo, last] between them.
struct Tile {
  std::int64_t m0, rows, first, last, lo;
};

// Queries [r0, r0 + rows) of head h of batch b. Buffers: s, kQueryBlock rows of s_stride floats
// (scores, then e); o, kQueryBlock rows of hd floats (the unnormalised output).
QEVAL_AVX2_FMA void attend_block(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t r0, std::int64_t rows,
                                 float* s, std::int64_t s_stride, float* o) {
  const std::int64_t g = h / p.group, hd = p.hd;
  const std::int64_t c0 = first_key(p, r0) / kKeys * kKeys;  // buffer column 0 is key c0, a panel start
  const float* q = p.q + b * p.q_stride[0] + h * p.q_stride[1];
  const float* kp = p.k_packed + (b * (p.H / p.group) + g) * p.panels * hd * kKeys;
  const float* v = p.v + b * p.v_stride[0] + g * p.v_stride[1];
  Tile tiles[(kQueryBlock + kMr - 1) / kMr];
  std::int64_t n_tiles = 0;
  for (std::int64_t m0 = 0; m0 < rows; m0 += kMr) {
    const std::int64_t nr = std::min(kMr, rows - m0), first = r0 + m0;
    tiles[n_tiles++] = {m0, nr, first, first + nr - 1, first_key(p, first)};
  }
  auto rows_of = [&](const Tile& t, const float* base, std::int64_t stride, std::int64_t offset, const float* out[kMr]) {
    for (std::int64_t i = 0; i < kMr; ++i) out[i] = base + (std::min(i, t.rows - 1) + offset) * stride;
  };
  // 1. Scores, key panels outermost: a panel of kᵀ (hd · 16 floats) serves every tile of the block
  //    from L1, and the block's queries stay there too.
  const std::int64_t last_key = r0 + rows - 1;
  for (std::int64_t key0 = c0; key0 <= last_key; key0 += kKeys) {
    const float* panel = kp + key0 / kKeys * hd * kKeys;
    for (std::int64_t t = 0; t < n_tiles; ++t) {
      const Tile& tile = tiles[t];
      if (key0 > tile.last || key0 + kKeys <= tile.lo) continue;  // wholly hidden from the tile
      const float* q_rows[kMr];
      rows_of(tile, q, p.q_stride[2], tile.first, q_rows);
      float* s_tile = s + tile.m0 * s_stride + (key0 - c0);
      fma_tile<2>(q_rows, panel, kKeys, hd, nullptr, s_tile, s_stride, tile.rows);
      scale_tile(s_tile, s_stride, tile.rows, p.scale);
    }
  }
  // 2. Each query's softmax over the keys it sees; the rest of its tile's key range set to 0.
  float denom[kQueryBlock];
  for (std::int64_t t = 0; t < n_tiles; ++t) {
    const Tile& tile = tiles[t];
    for (std::int64_t i = tile.m0; i < tile.m0 + tile.rows; ++i) {
      float* row = s + i * s_stride;
      const std::int64_t query = r0 + i, a = first_key(p, query) - c0, end = query + 1 - c0;  // the keys it sees
      float m = row_max(row + a, end - a);
      if (p.softmax_one) m = std::max(m, 0.0f);
      const float sum = exp_row(row + a, end - a, m);
      denom[i] = p.softmax_one ? sum + _mm256_cvtss_f32(exp_ps(_mm256_set1_ps(-m))) : sum;
      if (p.probs != nullptr)
        divide_row(row + a, end - a, denom[i], p.probs + ((b * p.H + h) * p.L + query) * p.L + c0 + a);
      std::fill(row + (tile.lo - c0), row + a, 0.0f);
      std::fill(row + end, row + (tile.last + 1 - c0), 0.0f);
    }
  }
  // 3. e · v, chunks of keys outermost: a chunk of v (kValueKeys rows) serves every tile from L1/L2;
  //    the partial sums wait in o.
  bool started[(kQueryBlock + kMr - 1) / kMr] = {};
  for (std::int64_t k0 = first_key(p, r0); k0 <= last_key; k0 += kValueKeys) {
    for (std::int64_t t = 0; t < n_tiles; ++t) {
      const Tile& tile = tiles[t];
      const std::int64_t from = std::max(k0, tile.lo), to = std::min(k0 + kValueKeys, tile.last + 1);
      if (from >= to) continue;
      const float* e_rows[kMr];
      rows_of(tile, s + (from - c0), s_stride, tile.m0, e_rows);
      float* o_tile = o + tile.m0 * hd;
      std::int64_t d0 = 0;
      for (; d0 + 16 <= hd; d0 += 16)
        fma_tile<2>(e_rows, v + from * p.v_stride[2] + d0, p.v_stride[2], to - from, started[t] ? o_tile + d0 : nullptr,
                    o_tile + d0, hd, tile.rows);
      if (d0 < hd)  // hd is a multiple of 8
        fma_tile<1>(e_rows, v + from * p.v_stride[2] + d0, p.v_stride[2], to - from, started[t] ? o_tile + d0 : nullptr,
                    o_tile + d0, hd, tile.rows);
      started[t] = true;
    }
  }
  // 4. out = o / Σ e, row by row.
  const std::int64_t out_stride = p.H * hd;
  for (std::int64_t i = 0; i < rows; ++i) divide_row(o + i * hd, hd, denom[i], p.out + (b * p.L + r0 + i) * out_stride + h * hd);
}

}  // namespace
#endif

at::Tensor fused_causal_attention_avx2(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                       std::int64_t window, double scale, bool softmax_one, at::Tensor* probs) {
  TORCH_CHECK(avx2_fused_attention_available(), "fused_causal_attention_avx2: needs a CPU with AVX2 and FMA");
  TORCH_CHECK(fused_causal_attention_fits(q_in, k_in, v_in), "fused_causal_attention_avx2: q ", q_in.sizes(), ", k ",
              k_in.sizes(), " and v ", v_in.sizes(),
              " do not fit (float32 CPU [B, H, L, hd] and [B, Hkv, L, hd], H a multiple of Hkv, hd a multiple of 8)");
  auto unit_channel_stride = [](const at::Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); };
  const at::Tensor q = unit_channel_stride(q_in), k = unit_channel_stride(k_in), v = unit_channel_stride(v_in);
  const std::int64_t B = q.size(0), H = q.size(1), L = q.size(2), hd = q.size(3), Hkv = k.size(1);
  at::Tensor out = at::empty({B, L, H * hd}, q.options());  // [B, L, H·hd]
  if (probs != nullptr) *probs = at::zeros({B, H, L, L}, q.options());
  if (B == 0 || L == 0) return out;
#ifdef QEVAL_ATTENTION_HAS_AVX2_VARIANT
  Problem p{};
  p.H = H, p.group = H / Hkv, p.L = L, p.hd = hd, p.window = window, p.panels = round_up(L, kKeys) / kKeys;
  p.scale = static_cast<float>(scale), p.softmax_one = softmax_one;
  p.q = q.data_ptr<float>(), p.v = v.data_ptr<float>(), p.out = out.data_ptr<float>();
  p.probs = probs != nullptr ? probs->data_ptr<float>() : nullptr;
  for (int d = 0; d < 3; ++d) p.q_stride[d] = q.stride(d), p.v_stride[d] = v.stride(d);
  at::Tensor k_packed = at::empty({B * Hkv * p.panels * hd * kKeys}, q.options());  // [B, Hkv, panels, hd, 16]
  float* kp = k_packed.data_ptr<float>();
  const float* k_data = k.data_ptr<float>();
  at::parallel_for(0, B * Hkv, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      pack_keys(k_data + (i / Hkv) * k.stride(0) + (i % Hkv) * k.stride(1), k.stride(2), L, hd,
                kp + i * p.panels * hd * kKeys);
  });
  p.k_packed = kp;
  const std::int64_t blocks = (L + kQueryBlock - 1) / kQueryBlock;
  // A block sees at most window + kQueryBlock keys from a panel start, and never more than L.
  const std::int64_t s_stride = round_up(std::min(L, window > 0 ? window + kQueryBlock + kKeys : L), kKeys) + kKeys;
  at::parallel_for(0, B * H * blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> s(static_cast<std::size_t>(kQueryBlock * s_stride)), o(static_cast<std::size_t>(kQueryBlock * hd));
    for (std::int64_t item = begin; item < end; ++item) {
      // Within a head, blocks in the order 0, last, 1, last - 1, …, as model/causal_attention_cpu.cpp
      // orders them: consecutive items, as at::parallel_for hands them out, mix cheap and dear blocks.
      const std::int64_t j = item % blocks, block = j % 2 == 0 ? j / 2 : blocks - 1 - j / 2;
      const std::int64_t r0 = block * kQueryBlock;
      attend_block(p, item / (H * blocks), item / blocks % H, r0, std::min(kQueryBlock, L - r0), s.data(), s_stride,
                   o.data());
    }
  });
#endif
  return out;
}

}  // namespace qeval::kernels::cpu
