// AVX-512 paths of the MX and NVFP4 round trips (quant/mx.h, quant/nvfp4.h), 16 blocks at a time:
// their maxima, then their 16 scales on 16 lanes, then their elements, 16 lanes of rounding
// inlined, where the portable loops compute each block's scale with scalar code (and library calls)
// before its elements. The same float32 operations in the same order (minifloat.h's
// round_to_element; the MX exponent by VGETEXPPS and VSCALEFPS, exact as ilogb and ldexp are), so
// the same bits, NaN and infinities included (tests/quant/float_formats_test.cpp holds them to the
// portable loops on random rows and on block maxima at every edge of the scale rules). Only
// without element codes: the oracle tests' codes come from the portable loops.
#pragma once

#include <cstdint>

#include "quant/mx.h"

namespace qeval {

// Whether this CPU runs the paths below (AVX-512 F, by CPUID).
bool element_blocks_avx512_available();

// mx_round_trip_row for format.block == 32, without codes.
void mx_round_trip_row_avx512(const float* x, float* y, std::int64_t n, const MxFormat& format, std::int8_t* exponents);

// nvfp4_round_trip without codes.
void nvfp4_round_trip_avx512(const float* x, float* y, std::int64_t rows, std::int64_t K, float amax_t,
                             float* block_scales);

}  // namespace qeval
