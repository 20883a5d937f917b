#include "quant/formats/mx.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "kernels/cpu/int8_quantize_cpu.h"

namespace qeval {
namespace {

int clamp_exponent(int s) { return std::clamp(s, -127, 127); }

}  // namespace

int mx_scale_exponent(float amax, const MxFormat& format) {
  const ElementFormat& f = element_format(format.element);
  int s = std::ilogb(amax) - f.emax;  // ⌊log₂ amax⌋ exactly, float32 subnormals included
  // Rounded up: the smallest s with max_elem · 2^s ≥ amax, which is the floor's s or the next.
  if (format.scale_round_up && static_cast<double>(amax) > std::ldexp(static_cast<double>(f.max_finite), s)) ++s;
  return clamp_exponent(s);
}

void mx_round_trip_row(const float* x, float* y, std::int64_t n, const MxFormat& format, std::int8_t* exponents,
                       std::uint8_t* codes) {
  // Blocks of 32 without codes (an evaluation's weights and activations) take the AVX-512 path on
  // a CPU that has it: the same operations on 16 lanes, inlined per block.
  if (!codes && format.block == 32 && element_blocks_avx512_available())
    return mx_round_trip_row_avx512(x, y, n, format, exponents);
  mx_round_trip_row_portable(x, y, n, format, exponents, codes);
}

void mx_round_trip_row_portable(const float* x, float* y, std::int64_t n, const MxFormat& format,
                                std::int8_t* exponents, std::uint8_t* codes) {
  const ElementFormat& f = element_format(format.element);
  for (std::int64_t begin = 0, b = 0; begin < n; begin += format.block, ++b) {
    const std::int64_t len = std::min(format.block, n - begin);
    const float amax = kernels::cpu::row_absmax(x + begin, len);
    if (std::isnan(amax)) {  // a NaN input (activations; weights are checked finite when read): NaN out
      QEVAL_CHECK(!exponents && !codes, "MX block {}: a value is NaN, which has no element code", b);
      std::fill(y + begin, y + begin + len, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    if (amax == 0) {
      std::fill(y + begin, y + begin + len, 0.0f);
      if (exponents) exponents[b] = -127;
      if (codes) std::fill(codes + begin, codes + begin + len, std::uint8_t{0});
      continue;
    }
    const int s = mx_scale_exponent(amax, format);
    const float scale = std::ldexp(1.0f, s);  // 2^−127 is a float32 subnormal, held exactly
    if (exponents) exponents[b] = static_cast<std::int8_t>(s);
    element_round_trip(x + begin, y + begin, len, scale, f);
    if (codes)
      for (std::int64_t i = 0; i < len; ++i) codes[begin + i] = element_code(y[begin + i] / scale, format.element);
  }
}

void mx_round_trip_row_reference(const double* x, double* y, std::int64_t n, const MxFormat& format) {
  const ElementFormat& f = element_format(format.element);
  for (std::int64_t begin = 0; begin < n; begin += format.block) {
    const std::int64_t len = std::min(format.block, n - begin);
    double amax = 0;
    for (std::int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(x[begin + i]));
    if (amax == 0) {
      std::fill(y + begin, y + begin + len, 0.0);
      continue;
    }
    // ⌊log₂ amax⌋ by frexp (amax = fr · 2^ex, fr in [0.5, 1)), the round-up rule by comparison.
    int ex = 0;
    std::frexp(amax, &ex);
    int s = ex - 1 - f.emax;
    if (format.scale_round_up && amax > std::ldexp(static_cast<double>(f.max_finite), s)) ++s;
    s = clamp_exponent(s);
    const double scale = std::ldexp(1.0, s);
    for (std::int64_t i = 0; i < len; ++i)
      y[begin + i] = round_to_element_reference(x[begin + i] / scale, format.element) * scale;
  }
}

}  // namespace qeval
