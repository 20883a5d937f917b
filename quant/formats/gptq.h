// GPTQ checkpoints (AutoGPTQ 0.7.1 `QuantLinear.pack`, GPTQModel, optimum): b ∈ {2, 3, 4, 8} bits,
// G groups along K (G = ceil(K / group_size), 1 for group_size −1). For an [N, K] weight:
//
//   qweight  [ceil(K·b / 32), N] int32   column n: a dense LSB-first stream (packed_bits.h) of the K
//                                        codes of output n along k ("packed along K"); AutoGPTQ's
//                                        3-bit layout (10 codes, a code split across words, ...) is
//                                        that stream
//   qzeros   [G, ceil(N·b / 32)] int32   row g: a stream of the N zero fields along n
//   scales   [G, N] float16 (bfloat16 or float32 accepted)
//   g_idx    [K] int32 (optional)        group of input channel k; without it k / group_size. With
//                                        desc_act false it must be k / group_size; with desc_act
//                                        (activation order) any group in [0, G)
//
//   W[n, k] = scale[g, n] · (code[k, n] − zero[g, n]),  g = g_idx[k], in float32 (one rounding)
//
// checkpoint_format gptq (v1) stores zero − 1: zero = field + 1, read as AutoGPTQ 0.7.1's
// qlinear_cuda and its CUDA / exllama kernels read it (mask the field, then add 1), so a stored
// field of 2^b − 1 — what AutoGPTQ's packer writes for a zero of 0, wrapping −1 — reads as 2^b.
// (AutoGPTQ's qlinear_cuda_old torch path masks after adding and reads 0 there; GPTQModel converts
// v1 to v2 by adding 1 to every field, carries included.) gptq_v2 stores the zero itself.
// Symmetric and asymmetric checkpoints are read alike: the zero is what is stored.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string_view>

namespace qeval {

enum class GptqFormat { v1, v2 };  // checkpoint_format "gptq" / "gptq_v2"

struct GptqWeight {
  at::Tensor qweight, qzeros, scales, g_idx;  // g_idx may be undefined
};

struct GptqArgs {
  int bits = 4;
  std::int64_t group_size = 128;  // −1: one group over K
  bool desc_act = false;
  GptqFormat format = GptqFormat::v1;
};

// [N, K] float32.
at::Tensor gptq_dequantize(const GptqWeight& w, const GptqArgs& args, std::int64_t N, std::int64_t K, std::string_view name);

}  // namespace qeval
