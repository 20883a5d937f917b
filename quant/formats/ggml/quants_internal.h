// Helpers shared by the ggml quantisers (quant/ggml_*.cpp); not part of the library's API.
//
// Each reproduces an integer conversion of ggml-quants.c exactly, including what x86-64 does
// where C leaves it undefined (a float out of an int8's range), so that no input can make
// qeval's bytes differ from llama.cpp's on that machine.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "quant/formats/ggml/types.h"

// ggml's sums are float32 in a fixed order: GCC must not fuse a * b + c into an FMA in the files
// that include this header (clang builds pass -ffp-contract=off: CMakeLists.txt).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace qeval::ggml_detail {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: a sub-block below it is all zero

// ggml's nearest_int: adding 1.5·2^23 rounds to the nearest integer, ties to even, for
// |x| < 2^22; the low 23 bits then hold it offset by 2^22. Kept as the bit trick (not lrintf)
// so that out-of-range inputs wrap as they do in ggml.
inline int nearest_int(float x) {
  const float v = x + 12582912.f;
  std::int32_t i;
  std::memcpy(&i, &v, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

// (int)roundf(v), halves away from zero, for |v| < 2^23, branch-free so that q8_0's loop
// vectorises: roundf is a libm call per value, and a branch on the fraction mispredicts on every
// other random value (together 90 % of q8_0's quantisation). Exact: below 2^23 the truncation
// and v − trunc(v) are exact floats.
// NaN and |v| >= 2^23 (never a finite q8_0 value) give 0, as NaN does through ggml's
// (int8_t)roundf on x86-64 (cvttss2si's INT32_MIN, low byte 0), and no undefined conversion.
inline std::int32_t round_half_away_small(float v) {
  v = std::fabs(v) < 8388608.0f ? v : 0.0f;  // a select: the loop still vectorises
  const std::int32_t t = static_cast<std::int32_t>(v);
  const float d = v - static_cast<float>(t);
  return t + static_cast<std::int32_t>(d >= 0.5f) - static_cast<std::int32_t>(d <= -0.5f);
}

// C's (int8_t)f and (uint8_t)f as GCC compiles them on x86-64: truncate to int32 (cvttss2si,
// which gives INT32_MIN for NaN and out-of-range values), keep the low byte.
inline std::int32_t trunc_to_int32(float f) {
  if (!(f > -2147483904.0f && f < 2147483648.0f)) return INT32_MIN;
  return static_cast<std::int32_t>(f);
}
inline std::int8_t trunc_to_int8(float f) { return static_cast<std::int8_t>(static_cast<std::uint8_t>(trunc_to_int32(f))); }
inline std::uint8_t trunc_to_uint8(float f) { return static_cast<std::uint8_t>(trunc_to_int32(f)); }

inline void check_row(std::int64_t n, int block, const char* type) {
  QEVAL_CHECK(n >= 0 && n % block == 0, "quantize_row_{}: {} values are not a whole number of {}-value blocks", type, n,
              block);
}

// Blocks are built in an aligned local and copied out, so callers' buffers need no alignment.
template <typename Block>
inline void store_block(void* blocks, std::int64_t i, const Block& b) {
  std::memcpy(static_cast<std::uint8_t*>(blocks) + i * static_cast<std::int64_t>(sizeof(Block)), &b, sizeof(Block));
}

template <typename Block>
inline void dequantize_row_blocks(const void* blocks, float* y, std::int64_t n, int block, const char* type) {
  QEVAL_CHECK(n >= 0 && n % block == 0, "dequantize_row_{}: {} values are not a whole number of {}-value blocks", type,
              n, block);
  const auto* src = static_cast<const std::uint8_t*>(blocks);
  for (std::int64_t i = 0; i < n / block; ++i) {
    Block b;
    std::memcpy(&b, src + i * static_cast<std::int64_t>(sizeof(Block)), sizeof(Block));
    dequantize_block(b, y + i * block);
  }
}

}  // namespace qeval::ggml_detail

namespace qeval {

// llama.cpp's Q8_0 and Q4_0 round trips fused on AVX-512 (legacy_round_trip_avx512.cpp): y[0, n) =
// dequantize(quantize(x[0, n))), n a multiple of 32, the same bits as the row functions. Callers
// run these where kernels::cpu::cpu_runs(CpuIsa::avx512) (kernels/cpu/cpu_isa.h).
void q8_0_round_trip_avx512(const float* x, float* y, std::int64_t n);
void q4_0_round_trip_avx512(const float* x, float* y, std::int64_t n);

}  // namespace qeval
