// 4-bit zero-point weight quantisation on the CPU (kernels/w4_quantize.h): rows split over threads
// with at::parallel_for; per row, each group's min and max, then its codes into a row buffer, then
// the row packed two codes a byte. The AVX2 variant (GCC target attribute, chosen by CPUID, so the
// binary runs on any x86-64) does the min/max and the divide-round-clamp eight floats at a time;
// the portable loops do the same maths one value at a time. Both give quant/quantize.h's bits:
// IEEE division (never a reciprocal multiply), round half to even, the same order of operations.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QEVAL_W4Q_HAS_AVX2_VARIANT 1
#endif

#include "kernels/large_tensor.h"
#include "kernels/w4_quantize.h"

namespace qeval::kernels {
namespace {

struct GroupParams {
  float scale, zero;
};

// quant/quantize.h zeropoint4_params for one group's min and max.
GroupParams group_params(float mn, float mx) {
  if (mx == mn) return {mn == 0.0f ? 1.0f : std::fabs(mn), mn < 0.0f ? 1.0f : 0.0f};
  const float s = (mx - mn) / 15.0f;
  return {s, std::nearbyint(-mn / s) + 0.0f};  // + 0: a −0 zero point (min = 0) becomes +0
}

void min_max_portable(const float* x, std::int64_t n, float& mn, float& mx) {
  for (std::int64_t k = 0; k < n; ++k) {
    mn = std::min(mn, x[k]);
    mx = std::max(mx, x[k]);
  }
}

void codes_portable(const float* x, std::int64_t n, GroupParams p, std::uint8_t* q) {
  for (std::int64_t k = 0; k < n; ++k) {
    const float c = std::nearbyint(x[k] / p.scale) + p.zero;  // default rounding mode: half to even
    q[k] = static_cast<std::uint8_t>(std::min(15.0f, std::max(0.0f, c)));
  }
}

#ifdef QEVAL_W4Q_HAS_AVX2_VARIANT
__attribute__((target("avx2"))) void min_max_avx2(const float* x, std::int64_t n, float& mn, float& mx) {
  __m256 vmin = _mm256_set1_ps(mn), vmax = _mm256_set1_ps(mx);
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 v = _mm256_loadu_ps(x + k);
    vmin = _mm256_min_ps(vmin, v);
    vmax = _mm256_max_ps(vmax, v);
  }
  alignas(32) float lo[8], hi[8];
  _mm256_store_ps(lo, vmin);
  _mm256_store_ps(hi, vmax);
  for (int i = 0; i < 8; ++i) {
    mn = std::min(mn, lo[i]);
    mx = std::max(mx, hi[i]);
  }
  min_max_portable(x + k, n - k, mn, mx);
}

__attribute__((target("avx2"))) void codes_avx2(const float* x, std::int64_t n, GroupParams p, std::uint8_t* q) {
  const __m256 s = _mm256_set1_ps(p.scale), z = _mm256_set1_ps(p.zero);
  const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(15.0f);
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + k), s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i c = _mm256_cvtps_epi32(_mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_add_ps(r, z))));
    const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + k), _mm_packus_epi16(words, words));
  }
  codes_portable(x + k, n - k, p, q + k);
}
#endif

using MinMaxFn = void (*)(const float*, std::int64_t, float&, float&);
using CodesFn = void (*)(const float*, std::int64_t, GroupParams, std::uint8_t*);

void pack_row(const std::uint8_t* codes, std::int64_t K, std::uint8_t* out) {
  const std::int64_t pairs = K / 2;
  for (std::int64_t j = 0; j < pairs; ++j)
    out[j] = static_cast<std::uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
  if (K % 2 == 1) out[pairs] = codes[K - 1];  // the high nibble of an odd row's last byte stays 0
}

W4Rows run(const at::Tensor& w_in, std::int64_t group_size, bool whole_tensor, MinMaxFn min_max, CodesFn codes) {
  TORCH_CHECK(w_in.defined() && w_in.dim() == 2 && w_in.scalar_type() == at::kFloat && w_in.is_cpu(),
              "quantize_w4_rows: expected float32 [N, K] on the CPU");
  const at::Tensor w = w_in.contiguous();
  const std::int64_t N = w.size(0), K = w.size(1);
  TORCH_CHECK(N > 0 && K > 0, "quantize_w4_rows: empty weight [", N, ", ", K, "]");
  const std::int64_t g = whole_tensor ? K : std::min(group_size, K);
  TORCH_CHECK(g >= 1, "quantize_w4_rows: group size must be at least 1, got ", group_size);
  const std::int64_t G = whole_tensor ? 1 : (K + g - 1) / g;
  W4Rows out;
  out.packed = empty_written_once({N, (K + 1) / 2}, at::kByte);  // huge pages: few page faults
  out.scales = at::empty({N, G}, at::TensorOptions().dtype(at::kFloat));
  out.zeros = at::empty({N, G}, at::TensorOptions().dtype(at::kFloat));
  const float* px = w.data_ptr<float>();
  float* ps = out.scales.data_ptr<float>();
  float* pz = out.zeros.data_ptr<float>();
  std::uint8_t* pq = out.packed.data_ptr<std::uint8_t>();

  GroupParams whole{};
  if (whole_tensor) {  // one pass for the matrix's min and max, combined in row order
    std::vector<float> row_min(static_cast<std::size_t>(N)), row_max(static_cast<std::size_t>(N));
    at::parallel_for(0, N, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t n = begin; n < end; ++n) {
        float mn = px[n * K], mx = px[n * K];
        min_max(px + n * K, K, mn, mx);
        row_min[static_cast<std::size_t>(n)] = mn;
        row_max[static_cast<std::size_t>(n)] = mx;
      }
    });
    const float mn = *std::min_element(row_min.begin(), row_min.end());
    const float mx = *std::max_element(row_max.begin(), row_max.end());
    whole = group_params(mn, mx);
  }
  at::parallel_for(0, N, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::uint8_t> row_codes(static_cast<std::size_t>(K));
    for (std::int64_t n = begin; n < end; ++n) {
      const float* x = px + n * K;
      for (std::int64_t j = 0; j < G; ++j) {
        const std::int64_t k0 = j * g, len = whole_tensor ? K : std::min(g, K - k0);
        GroupParams p = whole;
        if (!whole_tensor) {
          float mn = x[k0], mx = x[k0];
          min_max(x + k0, len, mn, mx);
          p = group_params(mn, mx);
        }
        ps[n * G + j] = p.scale;
        pz[n * G + j] = p.zero;
        codes(x + k0, len, p, row_codes.data() + k0);
      }
      pack_row(row_codes.data(), K, pq + n * ((K + 1) / 2));
    }
  });
  return out;
}

}  // namespace

namespace cpu {

bool w4_quantize_avx2_available() {
#ifdef QEVAL_W4Q_HAS_AVX2_VARIANT
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

W4Rows quantize_w4_rows_portable(const at::Tensor& w, std::int64_t group_size, bool whole_tensor) {
  return run(w, group_size, whole_tensor, min_max_portable, codes_portable);
}

W4Rows quantize_w4_rows_avx2(const at::Tensor& w, std::int64_t group_size, bool whole_tensor) {
  TORCH_CHECK(w4_quantize_avx2_available(), "quantize_w4_rows_avx2: this CPU has no AVX2");
#ifdef QEVAL_W4Q_HAS_AVX2_VARIANT
  return run(w, group_size, whole_tensor, min_max_avx2, codes_avx2);
#else
  return {};
#endif
}

}  // namespace cpu

W4Rows quantize_w4_rows(const at::Tensor& w, std::int64_t group_size, bool whole_tensor) {
  return cpu::w4_quantize_avx2_available() ? cpu::quantize_w4_rows_avx2(w, group_size, whole_tensor)
                                           : cpu::quantize_w4_rows_portable(w, group_size, whole_tensor);
}

}  // namespace qeval::kernels
