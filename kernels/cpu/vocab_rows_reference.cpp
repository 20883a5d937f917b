// The scalar reference of kernels/cpu/vocab_rows_cpu.h: one float at a time, every operation of
// the vector variants in the same order (std::fma for each fused multiply-add, and no contraction
// of the rest: a compiler that fused a multiply and an add here would change the bits).
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/vocab_rows_cpu.h"

#if defined(__clang__)
#define QEVAL_SEPARATE_ROUNDING
#else
#define QEVAL_SEPARATE_ROUNDING __attribute__((optimize("fp-contract=off")))
#endif

namespace qeval::kernels::cpu {
namespace {

double in_order(const double lanes[8]) {
  double sum = 0;
  for (int k = 0; k < 8; ++k) sum += lanes[k];
  return sum;
}

QEVAL_SEPARATE_ROUNDING float max_first(const float* x, std::int64_t n, std::int64_t* first) {
  float m = -std::numeric_limits<float>::infinity();
  for (std::int64_t v = 0; v < n; ++v) m = m > x[v] ? m : x[v];
  *first = 0;
  for (std::int64_t v = 0; v < n; ++v)
    if (x[v] == m) {
      *first = v;
      break;
    }
  return m;
}

QEVAL_SEPARATE_ROUNDING double exp_sum(const float* x, std::int64_t n, float m, float* e) {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t v = 0; v < n; ++v) {
    const float ev = exp_lane(x[v] - m);
    if (e != nullptr) e[v] = ev;
    lanes[v & 7] += static_cast<double>(ev);
  }
  return in_order(lanes);
}

QEVAL_SEPARATE_ROUNDING double weighted_difference_sum(const float* f, const float* e, const float* x, std::int64_t n) {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t v = 0; v < n; ++v) {
    const float d = f[v] - x[v];
    const float term = d * e[v];
    lanes[v & 7] += static_cast<double>(term);
  }
  return in_order(lanes);
}

}  // namespace

QEVAL_SEPARATE_ROUNDING float exp_lane(float x) {
  if (std::isnan(x)) return x;  // NaN in, NaN out (its conversion to an integer below is undefined)
  const float lo = -87.3365478515625f, hi = 88.3762626647949f;
  float c = lo > x ? lo : x;  // the vector max(lo, x) and min(hi, ·): NaN passes through
  c = hi < c ? hi : c;
  const float scaled = c * 1.44269504088896341f;
  const float n = std::nearbyint(scaled);  // to nearest, ties to even (the default rounding mode)
  float r = std::fma(-n, 0.693359375f, c);
  r = std::fma(-n, -2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float r2 = r * r;
  const float r1 = r + 1.0f;
  p = std::fma(p, r2, r1);
  // 2^n through the exponent field, as the vector code's integer conversion and shift.
  const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  const float y = p * two_n;
  return x < lo ? 0.0f : y;
}

VocabRowKernels vocab_row_reference() { return {max_first, exp_sum, weighted_difference_sum}; }

}  // namespace qeval::kernels::cpu
