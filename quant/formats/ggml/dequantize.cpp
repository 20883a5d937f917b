// Reference dequantisers for ggml's block types (layouts in blocks.h) and the dispatch by
// type id. Each follows ggml-quants.c's dequantize_row_* loop for loop; the results are
// bit-identical to llama.cpp's Python package (gguf.quants.dequantize), the oracle of
// tests/loaders/checkpoints/gguf_dequantize_test.cpp.
//
// Float operations, in the order both ggml and gguf-py (numpy float32) perform them:
//   * fp16 scales are widened exactly; the integers become float32 exactly;
//   * IQ4_NL: d * grid value; MXFP4: grid value * 2^(e - 128);
//   * Q4_1/Q5_1: (d * q) + m; K-quants: d1 = d * sc and m1 = dmin * m once per sub-block, then
//     (d1 * q) - m1; Q6_K: (d * sc) * q, left to right.
// Every product here is exact in float32: d has at most 11 significant bits and the integers
// multiplying it at most 13 together (Q6_K: |sc * q| <= 128 * 32), so no product needs more than
// 24 bits, and none underflows (|d| >= 2^-24) or overflows (|x| < 65504 * 4096). The only
// rounding is the final + m / - m1. Hence the order of the multiplications and fused
// multiply-adds (-march=native, aarch64) cannot change a result, and neither can numpy's
// evaluation order. What remains is NaN propagation: when both operands of Q4_1/Q5_1's addition
// are NaN (a NaN or infinite d and m), numpy returns the first operand's NaN, as x86 and ARM
// hardware do for `a + b`; GCC 12 and clang 14 keep that operand order today, but + commutes
// for a compiler, so add_first_nan() makes it a guarantee.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "quant/formats/ggml/blocks.h"

namespace qeval {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF blocks are little-endian; a big-endian host would swap");

namespace {

// a + b, except that a NaN `a` is returned as it is even when b is NaN too (see the top).
inline float add_first_nan(float a, float b) { return std::isnan(a) ? a : a + b; }

}  // namespace

float fp16_to_fp32(ggml_half h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, or NaN with its payload as it is
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // ±0
  } else {
    // Subnormal: mantissa * 2^-24. Normalise: shift until the implicit bit (bit 10) is set.
    int e = 127 - 15 + 1;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (static_cast<std::uint32_t>(e) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void get_scale_min_k4(int j, const std::uint8_t* q, std::uint8_t* d, std::uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// ---- 32-element blocks ----

void dequantize_block(const block_q4_0& x, float* y) {
  const float d = fp16_to_fp32(x.d);
  for (int j = 0; j < QK4_0 / 2; ++j) {
    const int x0 = (x.qs[j] & 0x0F) - 8;
    const int x1 = (x.qs[j] >> 4) - 8;
    y[j] = static_cast<float>(x0) * d;
    y[j + QK4_0 / 2] = static_cast<float>(x1) * d;
  }
}

void dequantize_block(const block_q4_1& x, float* y) {
  const float d = fp16_to_fp32(x.d);
  const float m = fp16_to_fp32(x.m);
  for (int j = 0; j < QK4_1 / 2; ++j) {
    const int x0 = x.qs[j] & 0x0F;
    const int x1 = x.qs[j] >> 4;
    y[j] = add_first_nan(static_cast<float>(x0) * d, m);
    y[j + QK4_1 / 2] = add_first_nan(static_cast<float>(x1) * d, m);
  }
}

void dequantize_block(const block_q5_0& x, float* y) {
  const float d = fp16_to_fp32(x.d);
  std::uint32_t qh;
  std::memcpy(&qh, x.qh, sizeof qh);
  for (int j = 0; j < QK5_0 / 2; ++j) {
    const std::uint8_t xh_0 = static_cast<std::uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
    const std::uint8_t xh_1 = static_cast<std::uint8_t>((qh >> (j + 12)) & 0x10);
    const int x0 = ((x.qs[j] & 0x0F) | xh_0) - 16;
    const int x1 = ((x.qs[j] >> 4) | xh_1) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + QK5_0 / 2] = static_cast<float>(x1) * d;
  }
}

void dequantize_block(const block_q5_1& x, float* y) {
  const float d = fp16_to_fp32(x.d);
  const float m = fp16_to_fp32(x.m);
  std::uint32_t qh;
  std::memcpy(&qh, x.qh, sizeof qh);
  for (int j = 0; j < QK5_1 / 2; ++j) {
    const std::uint8_t xh_0 = static_cast<std::uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
    const std::uint8_t xh_1 = static_cast<std::uint8_t>((qh >> (j + 12)) & 0x10);
    const int x0 = (x.qs[j] & 0x0F) | xh_0;
    const int x1 = (x.qs[j] >> 4) | xh_1;
    y[j] = add_first_nan(static_cast<float>(x0) * d, m);
    y[j + QK5_1 / 2] = add_first_nan(static_cast<float>(x1) * d, m);
  }
}

void dequantize_block(const block_q8_0& x, float* y) {
  const float d = fp16_to_fp32(x.d);
  for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(x.qs[j]) * d;
}

void dequantize_block(const block_iq4_nl& x, float* y) {
  const float d = fp16_to_fp32(x.d);
  for (int j = 0; j < QK4_NL / 2; ++j) {
    y[j] = d * static_cast<float>(kvalues_iq4nl[x.qs[j] & 0x0F]);
    y[j + QK4_NL / 2] = d * static_cast<float>(kvalues_iq4nl[x.qs[j] >> 4]);
  }
}

float e8m0_to_fp32_half(std::uint8_t e) {
  const std::uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<std::uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void dequantize_block(const block_mxfp4& x, float* y) {
  const float d = e8m0_to_fp32_half(x.e);
  for (int j = 0; j < QK_MXFP4 / 2; ++j) {
    y[j] = static_cast<float>(kvalues_mxfp4[x.qs[j] & 0x0F]) * d;
    y[j + QK_MXFP4 / 2] = static_cast<float>(kvalues_mxfp4[x.qs[j] >> 4]) * d;
  }
}

// ---- K-quants ----

void dequantize_block(const block_q2_K& x, float* y) {
  const float d = fp16_to_fp32(x.d);
  const float min = fp16_to_fp32(x.dmin);
  const std::uint8_t* q = x.qs;
  int is = 0;
  for (int n = 0; n < QK_K; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {  // elements from q[0..16), then q[16..32)
        const std::uint8_t sc = x.scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF);
        const float ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
      }
      shift += 2;
    }
    q += 32;
  }
}

void dequantize_block(const block_q3_K& x, float* y) {
  // Unpack the 16 six-bit scales (the layout in blocks.h), as ggml's kmask1/kmask2 dance.
  std::int8_t scales[16];
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? x.scales[j] & 0xF : x.scales[j - 8] >> 4;
    const int high = (x.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = static_cast<std::int8_t>(low | (high << 4));
  }
  const float d_all = fp16_to_fp32(x.d);
  const std::uint8_t* q = x.qs;
  const std::uint8_t* hm = x.hmask;
  std::uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < QK_K; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {  // q[0..16), then q[16..32)
        const float dl = d_all * static_cast<float>(scales[is++] - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
      shift += 2;
      m = static_cast<std::uint8_t>(m << 1);
    }
    q += 32;
  }
}

void dequantize_block(const block_q4_K& x, float* y) {
  const std::uint8_t* q = x.qs;
  const float d = fp16_to_fp32(x.d);
  const float min = fp16_to_fp32(x.dmin);
  int is = 0;
  std::uint8_t sc, m;
  for (int j = 0; j < QK_K; j += 64) {
    get_scale_min_k4(is + 0, x.scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc);
    const float m1 = min * static_cast<float>(m);
    get_scale_min_k4(is + 1, x.scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc);
    const float m2 = min * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

void dequantize_block(const block_q5_K& x, float* y) {
  const std::uint8_t* ql = x.qs;
  const std::uint8_t* qh = x.qh;
  const float d = fp16_to_fp32(x.d);
  const float min = fp16_to_fp32(x.dmin);
  int is = 0;
  std::uint8_t sc, m;
  std::uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < QK_K; j += 64) {
    get_scale_min_k4(is + 0, x.scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc);
    const float m1 = min * static_cast<float>(m);
    get_scale_min_k4(is + 1, x.scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc);
    const float m2 = min * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    ql += 32;
    is += 2;
    u1 = static_cast<std::uint8_t>(u1 << 2);
    u2 = static_cast<std::uint8_t>(u2 << 2);
  }
}

void dequantize_block(const block_q6_K& x, float* y) {
  const float d = fp16_to_fp32(x.d);
  const std::uint8_t* ql = x.ql;
  const std::uint8_t* qh = x.qh;
  const std::int8_t* sc = x.scales;
  for (int n = 0; n < QK_K; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// ---- dispatch ----

namespace {

// Whole blocks copied out of unaligned bytes one at a time.
template <typename Block>
void dequantize_blocks(const std::uint8_t* src, std::uint64_t n_blocks, std::uint64_t block_elements, float* y) {
  for (std::uint64_t i = 0; i < n_blocks; ++i) {
    Block b;
    std::memcpy(&b, src + i * sizeof(Block), sizeof(Block));
    dequantize_block(b, y + i * block_elements);
  }
}

template <typename Block>
constexpr GgmlBlockSize block_size_of(int elements) {
  return {static_cast<std::uint64_t>(elements), sizeof(Block)};
}

bool block_size(std::uint32_t type, GgmlBlockSize* out) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: *out = {1, 4}; return true;
    case GgmlType::F16: *out = {1, 2}; return true;
    case GgmlType::BF16: *out = {1, 2}; return true;
    case GgmlType::Q4_0: *out = block_size_of<block_q4_0>(QK4_0); return true;
    case GgmlType::Q4_1: *out = block_size_of<block_q4_1>(QK4_1); return true;
    case GgmlType::Q5_0: *out = block_size_of<block_q5_0>(QK5_0); return true;
    case GgmlType::Q5_1: *out = block_size_of<block_q5_1>(QK5_1); return true;
    case GgmlType::Q8_0: *out = block_size_of<block_q8_0>(QK8_0); return true;
    case GgmlType::Q2_K: *out = block_size_of<block_q2_K>(QK_K); return true;
    case GgmlType::Q3_K: *out = block_size_of<block_q3_K>(QK_K); return true;
    case GgmlType::Q4_K: *out = block_size_of<block_q4_K>(QK_K); return true;
    case GgmlType::Q5_K: *out = block_size_of<block_q5_K>(QK_K); return true;
    case GgmlType::Q6_K: *out = block_size_of<block_q6_K>(QK_K); return true;
    case GgmlType::IQ4_NL: *out = block_size_of<block_iq4_nl>(QK4_NL); return true;
    case GgmlType::MXFP4: *out = block_size_of<block_mxfp4>(QK_MXFP4); return true;
  }
  return false;
}

}  // namespace

bool ggml_type_dequantizable(std::uint32_t type) {
  GgmlBlockSize s{};
  return block_size(type, &s);
}

const char* ggml_dequantizable_types() {
  return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4";
}

GgmlBlockSize ggml_block_size(std::uint32_t type) {
  GgmlBlockSize s{};
  QEVAL_CHECK(block_size(type, &s), "{} (ggml type {}) cannot be dequantised by qeval; supported: {}",
              ggml_type_name(type), type, ggml_dequantizable_types());
  return s;
}

namespace {

// Blocks [0, n_blocks) of one type from `src` into `out` (n elements in all), on this thread.
void dequantize_span(std::uint32_t type, const std::uint8_t* src, std::uint64_t n_blocks, const GgmlBlockSize& s,
                     float* out) {
  const std::uint64_t n = n_blocks * s.elements;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(out, src, n * sizeof(float));  // bits as they are, as gguf's view(np.float32)
      return;
    case GgmlType::F16:
      for (std::uint64_t i = 0; i < n; ++i) {
        ggml_half h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = fp16_to_fp32(h);
      }
      return;
    case GgmlType::BF16:  // the upper half of a float32
      for (std::uint64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
        std::memcpy(&out[i], &bits, 4);
      }
      return;
    case GgmlType::Q4_0: return dequantize_blocks<block_q4_0>(src, n_blocks, s.elements, out);
    case GgmlType::Q4_1: return dequantize_blocks<block_q4_1>(src, n_blocks, s.elements, out);
    case GgmlType::Q5_0: return dequantize_blocks<block_q5_0>(src, n_blocks, s.elements, out);
    case GgmlType::Q5_1: return dequantize_blocks<block_q5_1>(src, n_blocks, s.elements, out);
    case GgmlType::Q8_0: return dequantize_blocks<block_q8_0>(src, n_blocks, s.elements, out);
    case GgmlType::Q2_K: return dequantize_blocks<block_q2_K>(src, n_blocks, s.elements, out);
    case GgmlType::Q3_K: return dequantize_blocks<block_q3_K>(src, n_blocks, s.elements, out);
    case GgmlType::Q4_K: return dequantize_blocks<block_q4_K>(src, n_blocks, s.elements, out);
    case GgmlType::Q5_K: return dequantize_blocks<block_q5_K>(src, n_blocks, s.elements, out);
    case GgmlType::Q6_K: return dequantize_blocks<block_q6_K>(src, n_blocks, s.elements, out);
    case GgmlType::IQ4_NL: return dequantize_blocks<block_iq4_nl>(src, n_blocks, s.elements, out);
    case GgmlType::MXFP4: return dequantize_blocks<block_mxfp4>(src, n_blocks, s.elements, out);
  }
}

}  // namespace

void dequantize_ggml(std::uint32_t type, const void* bytes, std::uint64_t n_bytes, float* out, std::uint64_t n,
                     const std::string& what) {
  GgmlBlockSize s{};
  QEVAL_CHECK(block_size(type, &s), "{}: {} (ggml type {}) cannot be dequantised by qeval; supported: {}", what,
              ggml_type_name(type), type, ggml_dequantizable_types());
  QEVAL_CHECK(n % s.elements == 0, "{}: {} elements of type {} are not a whole number of {}-element blocks", what, n,
              ggml_type_name(type), s.elements);
  const std::uint64_t n_blocks = n / s.elements;
  std::uint64_t expected = 0;
  QEVAL_CHECK(!__builtin_mul_overflow(n_blocks, s.bytes, &expected) && expected == n_bytes,
              "{}: {} elements of type {} take {} blocks of {} bytes, but {} bytes were given", what, n,
              ggml_type_name(type), n_blocks, s.bytes, n_bytes);
  // Threaded over runs of blocks (64K elements a task): every block stands alone, so the values
  // do not depend on the split. A tensor is dequantised as it is read (F16 checkpoints are
  // converted here), so one thread per core matters as much as the disk.
  const auto* src = static_cast<const std::uint8_t*>(bytes);
  const std::int64_t grain = static_cast<std::int64_t>(std::max<std::uint64_t>(1, (std::uint64_t{1} << 16) / s.elements));
  at::parallel_for(0, static_cast<std::int64_t>(n_blocks), grain, [&](std::int64_t b0, std::int64_t b1) {
    const auto first = static_cast<std::uint64_t>(b0), count = static_cast<std::uint64_t>(b1 - b0);
    dequantize_span(type, src + first * s.bytes, count, s, out + first * s.elements);
  });
}

}  // namespace qeval
