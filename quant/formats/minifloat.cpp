#include "quant/formats/minifloat.h"

#include <array>

#include "common/error.h"

namespace qeval {
namespace {

// type, name, exponent bits, mantissa bits, bias, emin = 1 − bias, emax, largest finite.
// E4M3's largest is 1.75 · 2^8 (its all-ones code is NaN); the others use every code for numbers
// (E5M2's all-ones exponent is inf/NaN, so its largest is 1.75 · 2^15).
constexpr std::array<ElementFormat, 5> kFormats = {{
    {ElementType::e4m3, "e4m3", 4, 3, 7, -6, 8, 448.0f},
    {ElementType::e5m2, "e5m2", 5, 2, 15, -14, 15, 57344.0f},
    {ElementType::e2m3, "e2m3", 2, 3, 1, 0, 2, 7.5f},
    {ElementType::e3m2, "e3m2", 3, 2, 3, -2, 4, 28.0f},
    {ElementType::e2m1, "e2m1", 2, 1, 1, 0, 2, 6.0f},
}};

#if defined(__clang__)
#define QEVAL_NO_FP_CONTRACT
#else
#define QEVAL_NO_FP_CONTRACT optimize("fp-contract=off"),
#endif

// One branch-free loop, compiled for AVX-512, AVX2 and the baseline; the loader picks by CPUID.
// No FMA may fuse anything here (there is no multiply-add to fuse, but the attribute says so).
__attribute__((QEVAL_NO_FP_CONTRACT target_clones("avx512f", "avx2", "default"))) void round_trip_loop(
    const float* x, float* y, std::int64_t n, float scale, float max_finite, int emin, int mantissa_bits) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i] / scale;
    const float m = std::fabs(v), a = m < max_finite ? m : max_finite;
    int e = static_cast<int>(float_bits(a) >> 23) - 127;
    e = e < emin ? emin : e;
    const float c = bits_float(static_cast<std::uint32_t>(e - mantissa_bits + 127 + 23) << 23);
    y[i] = std::copysign((a + c) - c, v) * scale;
  }
}

}  // namespace

const ElementFormat& element_format(ElementType type) { return kFormats[static_cast<std::size_t>(type)]; }

std::optional<ElementType> parse_element_type(std::string_view name) {
  for (const ElementFormat& f : kFormats)
    if (name == f.name) return f.type;
  return std::nullopt;
}

std::string to_string(ElementType type) { return element_format(type).name; }

double round_to_element_reference(double v, ElementType type) {
  const ElementFormat& f = element_format(type);
  const double a = std::min(std::fabs(v), static_cast<double>(f.max_finite));
  if (a == 0) return std::copysign(0.0, v);
  // The binade of a (frexp: a = fr · 2^ex with fr in [0.5, 1)), or the subnormal range's.
  int ex = 0;
  std::frexp(a, &ex);
  const int e = std::max(ex - 1, f.emin);
  const double spacing = std::ldexp(1.0, e - f.mantissa_bits);
  const double k = a / spacing;  // exact: a power-of-two division
  const double below = std::floor(k), fraction = k - below;
  double chosen = below;
  if (fraction > 0.5 || (fraction == 0.5 && std::fmod(below, 2.0) != 0)) chosen = below + 1;
  return std::copysign(chosen * spacing, v);
}

std::uint8_t element_code(float on_grid, ElementType type) {
  const ElementFormat& f = element_format(type);
  const std::uint8_t sign = std::signbit(on_grid) ? static_cast<std::uint8_t>(1u << (f.exponent_bits + f.mantissa_bits)) : 0;
  const double a = std::fabs(static_cast<double>(on_grid));
  QEVAL_CHECK(a <= f.max_finite, "element_code: {} is beyond {}'s largest finite value {}", on_grid, f.name, f.max_finite);
  if (a == 0) return sign;
  int ex = 0;
  std::frexp(a, &ex);
  const int e = ex - 1;
  if (e < f.emin) {  // subnormal: exponent field 0, mantissa a / 2^(emin − m)
    const double mantissa = std::ldexp(a, f.mantissa_bits - f.emin);
    QEVAL_CHECK(mantissa == std::floor(mantissa), "element_code: {} is not on {}'s grid", on_grid, f.name);
    return static_cast<std::uint8_t>(sign | static_cast<int>(mantissa));
  }
  const double mantissa = (std::ldexp(a, -e) - 1.0) * (1 << f.mantissa_bits);
  QEVAL_CHECK(mantissa == std::floor(mantissa), "element_code: {} is not on {}'s grid", on_grid, f.name);
  return static_cast<std::uint8_t>(sign | ((e + f.bias) << f.mantissa_bits) | static_cast<int>(mantissa));
}

float element_value(std::uint8_t code, ElementType type) {
  const ElementFormat& f = element_format(type);
  const int mantissa_mask = (1 << f.mantissa_bits) - 1;
  const int exponent_field = (code >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = code & mantissa_mask;
  const bool negative = (code >> (f.exponent_bits + f.mantissa_bits)) & 1;
  const double magnitude = exponent_field == 0
                               ? std::ldexp(static_cast<double>(mantissa), f.emin - f.mantissa_bits)
                               : std::ldexp(1.0 + static_cast<double>(mantissa) / (1 << f.mantissa_bits),
                                            exponent_field - f.bias);
  return static_cast<float>(negative ? -magnitude : magnitude);
}

void element_round_trip(const float* x, float* y, std::int64_t n, float scale, const ElementFormat& f) {
  round_trip_loop(x, y, n, scale, f.max_finite, f.emin, f.mantissa_bits);
}

void element_round_trip(const double* x, double* y, std::int64_t n, double scale, ElementType type) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = round_to_element_reference(x[i] / scale, type) * scale;
}

}  // namespace qeval
