// NVFP4: E2M1 elements in blocks of 16 along the reduction dimension, each block with an E4M3
// scale, and one float32 scale per tensor (two-level, as NVIDIA ModelOpt and torchao compute it).
// For a tensor with amax_t = max |x| (a weight matrix; one sequence's activations), in float32
// and in this order:
//   s_tensor = amax_t / (448 · 6)              t = 6 · s_tensor
//   s_block  = E4M3(min(amax_block / t, 448))  round-to-nearest-even, saturating at 448
//   p        = s_block · s_tensor
//   element  = E2M1(clamp(x / p, ±6))          round-to-nearest-even;  x̂ = element · p
// Every division is an IEEE division. Where p is 0 (s_block 0: a block of zeros, or a product
// that underflows) the block's elements are 0; where amax_t is 0, or so small that s_tensor
// underflows to 0, every element and scale is 0. A row length that 16 does not divide ends in a
// shorter block.
// nvfp4_round_trip is the fast path; nvfp4_round_trip_reference the same order of float32
// operations written plainly with the reference element rounding (tests hold them equal and to
// ml_dtypes' casts).
#pragma once

#include <cstdint>

namespace qeval {

constexpr std::int64_t kNvfp4Block = 16;

// s_tensor of a tensor with largest |x| amax_t (0 when amax_t or the quotient is 0).
float nvfp4_tensor_scale(float amax_t);

// A block's E4M3 scale s_block and its product p = s_block · s_tensor, from the block's max |x|
// and t = 6 · s_tensor (the steps above, in that order). t is 0 only when s_tensor is: then every
// scale and element is 0.
struct Nvfp4BlockScale {
  float s_block;
  float p;
};
Nvfp4BlockScale nvfp4_block_scale(float amax_b, float t, float s_tensor);

// rows × K values sharing the tensor scale of amax_t (the caller's max |x| over the tensor).
// y = x̂ (y may be x). When given, block_scales[rows · ceil(K / 16)] receives every s_block and
// codes[rows · K] every element's E2M1 bits.
void nvfp4_round_trip(const float* x, float* y, std::int64_t rows, std::int64_t K, float amax_t,
                      float* block_scales = nullptr, std::uint8_t* codes = nullptr);
void nvfp4_round_trip_reference(const float* x, float* y, std::int64_t rows, std::int64_t K, float amax_t);
// The portable loops alone (nvfp4_round_trip takes an AVX-512 path without codes where the CPU
// has it), so tests hold the two equal on one CPU.
void nvfp4_round_trip_portable(const float* x, float* y, std::int64_t rows, std::int64_t K, float amax_t,
                               float* block_scales = nullptr, std::uint8_t* codes = nullptr);
// The AVX-512 path (element_blocks_avx512.cpp), without codes; called only where
// element_blocks_avx512_available() (minifloat.h).
void nvfp4_round_trip_avx512(const float* x, float* y, std::int64_t rows, std::int64_t K, float amax_t,
                             float* block_scales);

}  // namespace qeval
