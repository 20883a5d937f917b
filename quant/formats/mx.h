// OCP Microscaling (MX v1.0) blocks: k = 32 consecutive elements along the reduction dimension
// (a weight row's input features, a token's features) share one E8M0 scale X = 2^s.
//
//   s = ⌊log₂ amax_block⌋ − emax_elem, clamped to [−127, 127]     ("floor", the spec read literally)
//   element_i = E(clamp(x_i / X, ±max_elem)) with round-to-nearest-even,  x̂_i = element_i · X
// emax_elem is the exponent of the element type's largest binade (8 for E4M3, 15 for E5M2, 2 for
// E2M3, 4 for E3M2, 2 for E2M1). Under the floor rule a block maximum above max_elem · X
// saturates (up to 12.5 % for E4M3, 25 % for E2M1). Transformer Engine's recipe rounds the scale
// up instead, s = ⌈log₂(amax_block / max_elem)⌉, so nothing saturates ("up"). A block of zeros
// gives zeros (its exponent is written as −127). A row length that 32 does not divide ends in a
// shorter block: the spec's padding with zeros gives the same values.
//
// ⌊log₂ amax⌋ is taken exactly from the float's bits (ilogb, float32 subnormals included), never
// through a float log. X = 2^s is a float32 (2^−127 is a subnormal: no flush to zero anywhere), and
// x / X is an IEEE division. mx_round_trip_row is the fast path; mx_round_trip_row_reference the
// readable one in float64 with the reference element rounding (tests hold them equal).
#pragma once

#include <cstdint>

#include "quant/formats/minifloat.h"

namespace qeval {

struct MxFormat {
  ElementType element = ElementType::e4m3;
  std::int64_t block = 32;
  bool scale_round_up = false;  // false: OCP's floor rule; true: Transformer Engine's
};

// The shared exponent s of a block whose largest |x| is amax (finite, > 0), in [−127, 127].
int mx_scale_exponent(float amax, const MxFormat& format);

// One row of n values: y = x̂ (y may be x). When given, exponents[ceil(n / block)] receives each
// block's s and codes[n] each element's bits (minifloat.h element_code).
void mx_round_trip_row(const float* x, float* y, std::int64_t n, const MxFormat& format,
                       std::int8_t* exponents = nullptr, std::uint8_t* codes = nullptr);
void mx_round_trip_row_reference(const double* x, double* y, std::int64_t n, const MxFormat& format);
// The portable loops alone (mx_round_trip_row takes an AVX-512 path for blocks of 32 without
// codes where the CPU has it), so tests hold the two equal on one CPU.
void mx_round_trip_row_portable(const float* x, float* y, std::int64_t n, const MxFormat& format,
                                std::int8_t* exponents = nullptr, std::uint8_t* codes = nullptr);
// The AVX-512 path (element_blocks_avx512.cpp), for format.block == 32 and without codes; called
// only where element_blocks_avx512_available() (minifloat.h).
void mx_round_trip_row_avx512(const float* x, float* y, std::int64_t n, const MxFormat& format, std::int8_t* exponents);

}  // namespace qeval
