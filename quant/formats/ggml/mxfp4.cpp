// llama.cpp's MXFP4: blocks of 32 values, x = 2^(e - 128) * k with e an E8M0 exponent byte and k
// one of the doubled FP4 (E2M1) values 0, ±1, ±2, ±3, ±4, ±6, ±8, ±12. Equal byte for byte to
// quantize_row_mxfp4_ref at llama.cpp 0c1e57098 (ggml_quantize_chunk ignores an importance
// matrix for this type).
//
// This is llama.cpp's rounding, which differs from the OCP Microscaling spec's on ties:
//   * e = floor(log2f(amax)) - 2 + 127 (the spec's shared exponent too), computed with the C
//     library's log2f as ggml does; amax = 0 gives e = 0. For amax below 2^-125 the exponent is
//     negative and ggml's (uint8_t) conversion wraps it (e.g. -24 -> 232): kept, see below.
//   * each value takes the grid entry with the smallest |k·2^(e-128) - x| in float32, the first
//     in table order (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, ..., -12) on a tie: a tie goes to the value
//     nearer zero (in FP4 units 0.75 -> 0.5, 1.75 -> 1.5, 3.5 -> 3), where OCP rounds to nearest
//     even (0.75 -> 1, 1.75 -> 2, 3.5 -> 4). Values beyond 6 units saturate at ±6 in both.
// Those wrapped exponents (blocks whose largest |x| is below 2^-125, i.e. float32 subnormals and
// the smallest normals) make a huge scale and all-zero codes in llama.cpp; qeval writes the same.
#include <cmath>

#include "quant/formats/ggml/quants.h"
#include "quant/formats/ggml/quants_internal.h"

namespace qeval {

namespace {

int best_index_mxfp4(float x, float e) {
  int best_index = 0;
  float best_err = std::fabs(static_cast<float>(kvalues_mxfp4[0]) * e - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kvalues_mxfp4[i]) * e - x);
    if (err < best_err) {
      best_index = i;
      best_err = err;
    }
  }
  return best_index;
}

}  // namespace

void quantize_row_mxfp4(const float* x, void* blocks, std::int64_t n) {
  ggml_detail::check_row(n, QK_MXFP4, "mxfp4");
  for (std::int64_t i = 0; i < n / QK_MXFP4; ++i, x += QK_MXFP4) {
    float amax = 0.0f;
    for (int j = 0; j < QK_MXFP4; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    block_mxfp4 b;
    b.e = amax > 0.0f ? ggml_detail::trunc_to_uint8(std::floor(log2f(amax)) - 2 + 127) : 0;
    const float d = e8m0_to_fp32_half(b.e);
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      const int q0 = best_index_mxfp4(x[j], d);
      const int q1 = best_index_mxfp4(x[j + QK_MXFP4 / 2], d);
      b.qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
    }
    ggml_detail::store_block(blocks, i, b);
  }
}

// ggml's quantize_mxfp4 never reads the importance matrix: the plain path either way.
void quantize_row_mxfp4(const float* x, void* blocks, std::int64_t n, const float* /*importance*/) {
  quantize_row_mxfp4(x, blocks, n);
}

void dequantize_row_mxfp4(const void* blocks, float* y, std::int64_t n) {
  ggml_detail::dequantize_row_blocks<block_mxfp4>(blocks, y, n, QK_MXFP4, "mxfp4");
}

}  // namespace qeval
