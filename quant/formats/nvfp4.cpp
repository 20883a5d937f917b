#include "quant/formats/nvfp4.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/int8_quantize_cpu.h"

#include "quant/formats/minifloat.h"

namespace qeval {

float nvfp4_tensor_scale(float amax_t) { return amax_t / (448.0f * 6.0f); }

Nvfp4BlockScale nvfp4_block_scale(float amax_b, float t, float s_tensor) {
  const float s_block =
      t == 0 ? 0.0f : round_to_element(std::min(amax_b / t, 448.0f), element_format(ElementType::e4m3));
  return {s_block, s_block * s_tensor};
}

void nvfp4_round_trip(const float* x, float* y, std::int64_t rows, std::int64_t K, float amax_t, float* block_scales,
                      std::uint8_t* codes) {
  // Without codes (an evaluation), the AVX-512 path where the CPU has it (as for MX).
  if (!codes && element_blocks_avx512_available())
    return nvfp4_round_trip_avx512(x, y, rows, K, amax_t, block_scales);
  nvfp4_round_trip_portable(x, y, rows, K, amax_t, block_scales, codes);
}

void nvfp4_round_trip_portable(const float* x, float* y, std::int64_t rows, std::int64_t K, float amax_t,
                               float* block_scales, std::uint8_t* codes) {
  const ElementFormat& e2m1 = element_format(ElementType::e2m1);
  const float s_tensor = nvfp4_tensor_scale(amax_t);
  const float t = 6.0f * s_tensor;
  const std::int64_t blocks = (K + kNvfp4Block - 1) / kNvfp4Block;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * K;
    float* yr = y + r * K;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t begin = b * kNvfp4Block, len = std::min(kNvfp4Block, K - begin);
      const auto [s_block, p] = nvfp4_block_scale(kernels::cpu::row_absmax(xr + begin, len), t, s_tensor);
      if (block_scales) block_scales[r * blocks + b] = s_block;
      if (p == 0) {
        std::fill(yr + begin, yr + begin + len, 0.0f);
        if (codes) std::fill(codes + r * K + begin, codes + r * K + begin + len, std::uint8_t{0});
        continue;
      }
      element_round_trip(xr + begin, yr + begin, len, p, e2m1);
      if (codes)
        for (std::int64_t i = 0; i < len; ++i)
          codes[r * K + begin + i] = element_code(round_to_element(xr[begin + i] / p, e2m1), ElementType::e2m1);
    }
  }
}

void nvfp4_round_trip_reference(const float* x, float* y, std::int64_t rows, std::int64_t K, float amax_t) {
  const float s_tensor = amax_t / 2688.0f;
  const float t = 6.0f * s_tensor;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t begin = 0; begin < K; begin += kNvfp4Block) {
      const std::int64_t end = std::min(K, begin + kNvfp4Block);
      float amax_b = 0;
      for (std::int64_t k = begin; k < end; ++k) amax_b = std::max(amax_b, std::fabs(x[r * K + k]));
      float s_block = 0;
      if (t != 0) {
        const float q = amax_b / t;
        s_block = static_cast<float>(round_to_element_reference(q > 448.0f ? 448.0f : q, ElementType::e4m3));
      }
      const float p = s_block * s_tensor;
      for (std::int64_t k = begin; k < end; ++k) {
        if (p == 0) {
          y[r * K + k] = 0;
          continue;
        }
        const float v = x[r * K + k] / p;
        const float element = static_cast<float>(round_to_element_reference(v, ElementType::e2m1));
        y[r * K + k] = element * p;
      }
    }
  }
}

}  // namespace qeval
