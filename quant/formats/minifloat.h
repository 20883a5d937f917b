// Minifloat elements: the FP8, FP6 and FP4 types of the formats users ship (OCP 8-bit floating
// point and Microscaling v1.0; NVIDIA's FP8 and NVFP4 use the same element types).
//
//   type   exponent/mantissa bits   bias   smallest normal   largest finite   infinities / NaN
//   E4M3   4 / 3                    7      2^-6              448              no inf ("fn"): S.1111.111 is NaN
//   E5M2   5 / 2                    15     2^-14             57,344           IEEE-like inf and NaN
//   E2M3   2 / 3                    1      1                 7.5              none (MX FP6)
//   E3M2   3 / 2                    3      2^-2              28               none (MX FP6)
//   E2M1   2 / 1                    1      1                 6                none (MX FP4, NVFP4)
//
// Rounding a float32 v to an element: clamp to ±largest finite, then round to the nearest
// element value with ties to even (the element's last mantissa bit 0). Subnormal elements are
// kept (no flush to zero); a float32 subnormal input rounds like any other value. Infinities and
// NaN are never given here: every caller refuses non-finite inputs first.
//
// Two implementations, held to each other and to ml_dtypes by tests/quant/minifloat_test.cpp:
//   round_to_element            the fast one: with e = max(exponent of |v|, smallest normal
//                               exponent), the grid spacing is u = 2^(e − m); adding C = 2^23·u
//                               to |v| makes float32's own round-to-nearest-even round to a
//                               multiple of u (the sum lies in [C, 2C), where float32's spacing is
//                               exactly u, and an even float32 mantissa is an even element
//                               mantissa), and subtracting C is exact (Sterbenz). Branch-free.
//   round_to_element_reference  the readable one: the same grid in float64, k = |v| / u split
//                               into floor and fraction, the nearest k chosen, ties to the even k.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace qeval {

enum class ElementType : std::uint8_t { e4m3, e5m2, e2m3, e3m2, e2m1 };

struct ElementFormat {
  ElementType type;
  const char* name;      // "e4m3", as scheme files write it
  int exponent_bits;
  int mantissa_bits;     // m
  int bias;
  int emin;              // exponent of the smallest normal, 1 − bias
  int emax;              // exponent of the largest finite value's binade (OCP MX's emax_elem)
  float max_finite;
  int bits() const { return 1 + exponent_bits + mantissa_bits; }
};

const ElementFormat& element_format(ElementType type);
// "e4m3", "e5m2", "e2m3", "e3m2", "e2m1"; nullopt for anything else.
std::optional<ElementType> parse_element_type(std::string_view name);
std::string to_string(ElementType type);

inline std::uint32_t float_bits(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

// The fast rounding (see above). v finite.
inline float round_to_element(float v, const ElementFormat& f) {
  const float m = std::fabs(v), a = m < f.max_finite ? m : f.max_finite;  // minps: vectorises
  int e = static_cast<int>(float_bits(a) >> 23) - 127;  // float32 subnormals and 0: −127
  e = e < f.emin ? f.emin : e;
  const float c = bits_float(static_cast<std::uint32_t>(e - f.mantissa_bits + 127 + 23) << 23);
  const float r = (a + c) - c;
  return std::copysign(r, v);
}

// The readable rounding (see above), in float64: the nearest-grid rule any float64 path is
// checked by. v finite.
double round_to_element_reference(double v, ElementType type);

// The element's bits (sign, exponent, mantissa; in the low 1 + E + M bits of the byte, as
// ml_dtypes stores them) of a value already on the element's grid (what round_to_element
// returns); element_value decodes them.
std::uint8_t element_code(float on_grid, ElementType type);
float element_value(std::uint8_t code, ElementType type);

// y[i] = round_to_element(x[i] / scale) · scale in float32, with x[i] / scale an IEEE division
// (never a reciprocal multiply: every implementation then gets the same elements). y may be x.
// CPUID-dispatched (AVX-512, AVX2, baseline copies of one branch-free loop).
void element_round_trip(const float* x, float* y, std::int64_t n, float scale, const ElementFormat& f);
// The same in float64 with the reference rounding (`--dtype fp64`).
void element_round_trip(const double* x, double* y, std::int64_t n, double scale, ElementType type);

// Whether this CPU runs the AVX-512 paths of the block formats built on these elements (MX and
// NVFP4: element_blocks_avx512.cpp, declared in mx.h and nvfp4.h; AVX-512 F, by CPUID).
bool element_blocks_avx512_available();

}  // namespace qeval
