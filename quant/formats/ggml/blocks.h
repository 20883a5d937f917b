// ggml's quantised block layouts, as GGUF files store them, and qeval's reference dequantisers.
//
// Each block holds `QK` consecutive elements of one row (rows are ne[0] long, a multiple of QK).
// The structs mirror ggml-common.h field for field; byte order is little-endian (as GGUF), and
// the fp16 scales are IEEE binary16 bit patterns (`ggml_half`). Blocks are copied out of the
// file's bytes one at a time (memcpy), so the data needs no alignment.
//
// The dequantisers follow ggml-quants.c's dequantize_row_* and give results bit-identical to
// llama.cpp's Python package (`gguf.quants.dequantize`, numpy float32), which the tests use as
// the oracle; dequantize.cpp explains why the order of float operations cannot change a
// result (every product is exact in float32) and what it takes to match NaNs too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qeval {

// ggml type ids (ggml.h `enum ggml_type`) that qeval names in its code.
enum class GgmlType : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  BF16 = 30,
  MXFP4 = 39,
};

using ggml_half = std::uint16_t;  // IEEE binary16 bits

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK4_NL = 32;
constexpr int QK_MXFP4 = 32;
constexpr int QK_K = 256;         // the K-quants' super-block
constexpr int K_SCALE_SIZE = 12;  // Q4_K/Q5_K: 8 six-bit scales + 8 six-bit mins

// ---- 32-element blocks: x = d * q (symmetric) or x = d * q + m (with a minimum) ----

// Q4_0: 18 bytes. x[j] = d * (nibble - 8); qs[j] holds element j (low nibble) and j + 16 (high).
//   | d fp16 | qs[16]: lo = x[0..15], hi = x[16..31] |
struct block_q4_0 {
  ggml_half d;
  std::uint8_t qs[QK4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 2 + QK4_0 / 2, "wrong q4_0 block size/padding");

// Q4_1: 20 bytes. x[j] = d * nibble + m; nibbles as Q4_0.
//   | d fp16 | m fp16 | qs[16] |
struct block_q4_1 {
  ggml_half d;
  ggml_half m;
  std::uint8_t qs[QK4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 2 * sizeof(ggml_half) + QK4_1 / 2, "wrong q4_1 block size/padding");

// Q5_0: 22 bytes. x[j] = d * (q - 16), q = nibble | bit j of qh << 4 (5 bits).
//   | d fp16 | qh[4]: bit j (little-endian u32) = 5th bit of x[j] | qs[16]: nibbles as Q4_0 |
struct block_q5_0 {
  ggml_half d;
  std::uint8_t qh[4];
  std::uint8_t qs[QK5_0 / 2];
};
static_assert(sizeof(block_q5_0) == sizeof(ggml_half) + sizeof(std::uint32_t) + QK5_0 / 2,
              "wrong q5_0 block size/padding");

// Q5_1: 24 bytes. x[j] = d * q + m, q as Q5_0 (0..31).
//   | d fp16 | m fp16 | qh[4] | qs[16] |
struct block_q5_1 {
  ggml_half d;
  ggml_half m;
  std::uint8_t qh[4];
  std::uint8_t qs[QK5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 2 * sizeof(ggml_half) + sizeof(std::uint32_t) + QK5_1 / 2,
              "wrong q5_1 block size/padding");

// Q8_0: 34 bytes. x[j] = d * qs[j], qs signed.
//   | d fp16 | qs[32] int8 |
struct block_q8_0 {
  ggml_half d;
  std::int8_t qs[QK8_0];
};
static_assert(sizeof(block_q8_0) == sizeof(ggml_half) + QK8_0, "wrong q8_0 block size/padding");

// IQ4_NL: 18 bytes. x[j] = d * kvalues_iq4nl[nibble], a fixed non-uniform 16-value grid;
// nibbles as Q4_0 (low = x[0..15], high = x[16..31]).
//   | d fp16 | qs[16] |
struct block_iq4_nl {
  ggml_half d;
  std::uint8_t qs[QK4_NL / 2];
};
static_assert(sizeof(block_iq4_nl) == sizeof(ggml_half) + QK4_NL / 2, "wrong iq4_nl block size/padding");

// The IQ4_NL grid (ggml-common.h kvalues_iq4nl).
inline constexpr std::int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                  1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4: 17 bytes. x[j] = e8m0_to_fp32_half(e) * kvalues_mxfp4[nibble]: the FP4 (E2M1) values
// doubled (so that they are integers) times half the E8M0 scale 2^(e - 127); nibbles as Q4_0.
// Every e (0..255) is a power of two here: ggml gives 0xFF no NaN meaning.
//   | e uint8 (E8M0) | qs[16] |
struct block_mxfp4 {
  std::uint8_t e;
  std::uint8_t qs[QK_MXFP4 / 2];
};
static_assert(sizeof(block_mxfp4) == 1 + QK_MXFP4 / 2, "wrong mxfp4 block size/padding");

// E2M1 values times two, sign in bit 3 (ggml-common.h kvalues_mxfp4).
inline constexpr std::int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// ---- 256-element super-blocks (K-quants): 16 sub-blocks of 16 or 8 of 32, each with its own
// integer scale (and min) that multiplies the fp16 super-block scale d (and dmin) ----

// Q2_K: 84 bytes, 2.625 bits per weight. 16 sub-blocks of 16: x = d*sc * q - dmin*m, q 2 bits.
//   | scales[16]: lo nibble sc, hi nibble m | qs[64]: 2-bit q | d fp16 | dmin fp16 |
// qs order: each half of 128 elements uses 32 bytes; element 32*s + l of the half is bits
// 2s..2s+1 of qs[l] (l < 32, s = 0..3).
struct block_q2_K {
  std::uint8_t scales[QK_K / 16];
  std::uint8_t qs[QK_K / 4];
  ggml_half d;
  ggml_half dmin;
};
static_assert(sizeof(block_q2_K) == 2 * sizeof(ggml_half) + QK_K / 16 + QK_K / 4, "wrong q2_K block size/padding");

// Q3_K: 110 bytes, 3.4375 bits per weight. 16 sub-blocks of 16: x = d * (sc - 32) * q with
// q = (2 low bits from qs) - (hmask bit clear ? 4 : 0), in -4..3; sc is 6 bits.
//   | hmask[32]: bit k of hmask[l] = high bit of element 32*k + l | qs[64]: low 2 bits, order as
//   Q2_K | scales[12]: 16 six-bit scales | d fp16 |
// scales: sc[j] low 4 bits are nibble j%8 of bytes 0..7 (lo nibbles first: sc 0..7 in bytes
// 0..7 lo, sc 8..15 in bytes 0..7 hi); high 2 bits are bits 2*(j/4)..+1 of byte 8 + j%4.
struct block_q3_K {
  std::uint8_t hmask[QK_K / 8];
  std::uint8_t qs[QK_K / 4];
  std::uint8_t scales[12];
  ggml_half d;
};
static_assert(sizeof(block_q3_K) == sizeof(ggml_half) + QK_K / 4 + QK_K / 8 + 12, "wrong q3_K block size/padding");

// Q4_K: 144 bytes, 4.5 bits per weight. 8 sub-blocks of 32: x = d*sc * q - dmin*m, q 4 bits.
//   | d fp16 | dmin fp16 | scales[12]: 8 six-bit sc + 8 six-bit m (get_scale_min_k4) | qs[128] |
// qs order: each 64 elements use 32 bytes, the low nibbles first (sub-block 2i), then the high
// nibbles (sub-block 2i + 1).
struct block_q4_K {
  ggml_half d;
  ggml_half dmin;
  std::uint8_t scales[K_SCALE_SIZE];
  std::uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q4_K) == 2 * sizeof(ggml_half) + K_SCALE_SIZE + QK_K / 2, "wrong q4_K block size/padding");

// Q5_K: 176 bytes, 5.5 bits per weight. As Q4_K with a fifth bit: bit s of qh[l] is the high
// bit of element 32*s + l (q 0..31).
//   | d fp16 | dmin fp16 | scales[12] | qh[32] | qs[128] |
struct block_q5_K {
  ggml_half d;
  ggml_half dmin;
  std::uint8_t scales[K_SCALE_SIZE];
  std::uint8_t qh[QK_K / 8];
  std::uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q5_K) == 2 * sizeof(ggml_half) + K_SCALE_SIZE + QK_K / 2 + QK_K / 8,
              "wrong q5_K block size/padding");

// Q6_K: 210 bytes, 6.5625 bits per weight. 16 sub-blocks of 16: x = d * scales[s] * (q - 32),
// q 6 bits = 4 from ql, 2 from qh. Per half of 128 elements (ql += 64, qh += 32):
//   element l      : ql[l] lo,      qh[l] bits 0-1      element l + 64: ql[l] hi,      qh[l] bits 4-5
//   element l + 32 : ql[l + 32] lo, qh[l] bits 2-3      element l + 96: ql[l + 32] hi, qh[l] bits 6-7
//   | ql[128] | qh[64] | scales[16] int8 | d fp16 |
struct block_q6_K {
  std::uint8_t ql[QK_K / 2];
  std::uint8_t qh[QK_K / 4];
  std::int8_t scales[QK_K / 16];
  ggml_half d;
};
static_assert(sizeof(block_q6_K) == sizeof(ggml_half) + QK_K / 16 + 3 * QK_K / 4, "wrong q6_K block size/padding");

// fp16 bits -> float32, exact (every binary16 value is a float32 value). NaN payloads are
// kept as they are, signalling ones included, as numpy's software conversion does.
float fp16_to_fp32(ggml_half h);

// 2^(e - 128), exact: half the E8M0 scale (ggml-impl.h ggml_e8m0_to_fp32_half); e < 2 give
// the float32 subnormals 2^-128 and 2^-127.
float e8m0_to_fp32_half(std::uint8_t e);

// Q4_K/Q5_K: sub-block j's 6-bit scale and min (ggml-quants.c get_scale_min_k4).
//   bytes 0-3: sc 0-3 (bits 0-5), top 2 bits of sc 4-7     bytes 8-11: sc 4-7 (lo nibble),
//   bytes 4-7: m 0-3 (bits 0-5),  top 2 bits of m 4-7                  m 4-7 (hi nibble)
void get_scale_min_k4(int j, const std::uint8_t* scales, std::uint8_t* sc, std::uint8_t* m);

// One block to QK floats (y[0..QK)).
void dequantize_block(const block_q4_0& x, float* y);
void dequantize_block(const block_q4_1& x, float* y);
void dequantize_block(const block_q5_0& x, float* y);
void dequantize_block(const block_q5_1& x, float* y);
void dequantize_block(const block_q8_0& x, float* y);
void dequantize_block(const block_iq4_nl& x, float* y);
void dequantize_block(const block_mxfp4& x, float* y);
void dequantize_block(const block_q2_K& x, float* y);
void dequantize_block(const block_q3_K& x, float* y);
void dequantize_block(const block_q4_K& x, float* y);
void dequantize_block(const block_q5_K& x, float* y);
void dequantize_block(const block_q6_K& x, float* y);

// ---- every ggml type: name and block size ----

// ggml.c's type_traits for one id: llama.cpp's name, elements per block, bytes per block (F32,
// F16, BF16 and the integer types count as blocks of one element).
struct GgmlTypeTraits {
  std::uint32_t id;
  const char* name;
  std::uint64_t block;
  std::uint64_t bytes;
};
// Every type a GGUF file may name, dequantisable or not; null for an id ggml does not have.
const GgmlTypeTraits* ggml_type_traits(std::uint32_t id);
// "F32", "Q4_K", ... or "type N" for ids this build does not know.
std::string ggml_type_name(std::uint32_t type);

// ---- dispatch by ggml type id ----

// Elements per block and bytes per block of a type qeval dequantises (F32, F16, BF16 count as
// blocks of one element).
struct GgmlBlockSize {
  std::uint64_t elements;
  std::uint64_t bytes;
};

// Whether qeval turns this type into float32: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4.
bool ggml_type_dequantizable(std::uint32_t type);
GgmlBlockSize ggml_block_size(std::uint32_t type);  // throws for a type that is not dequantisable
// The list above, for error messages.
const char* ggml_dequantizable_types();

// Dequantises `n` elements of `type` held in `bytes` (exactly n / elements * bytes of them,
// whole blocks, no alignment needed) into out[0..n). Throws qeval::Error naming `what` (the
// file and tensor) when the type is not one of the above, n is not a multiple of the block, or
// the byte count differs.
void dequantize_ggml(std::uint32_t type, const void* bytes, std::uint64_t n_bytes, float* out, std::uint64_t n,
                     const std::string& what);

}  // namespace qeval
