// llama.cpp's activation blocks (issue 64, `"activations": "gguf-q8"` on weights of kind ggml).
//
// llama.cpp's CPU matrix product does not multiply float activations: each row of the input is
// first converted to the weight type's "vec_dot type" (ggml-cpu.c type_traits_cpu), and the dot
// product runs on the two block formats. Which type, per weight type, as of commit 0c1e57098:
//   Q4_0 Q5_0 Q8_0 IQ4_NL MXFP4  -> Q8_0   blocks of 32, fp16 scale
//   Q4_1 Q5_1                    -> Q8_1   blocks of 32, fp16 scale and fp16 block sum
//   Q2_K … Q6_K                  -> Q8_K   super-blocks of 256, float32 scale
//   F16                          -> F16    every value rounded to binary16
//   F32                          -> F32    unchanged
// The rounding, as llama.cpp's x86-64 build computes it (ggml-cpu/arch/x86/quants.c and
// repack.cpp, the paths every AVX/AVX2/AVX-512 machine runs):
//   Q8_0, Q8_1  amax = max |x| over the block; d = amax / 127 (stored as fp16);
//               q = rint(x · (127 / amax)), round half to even (_mm256_round_ps), 0 where amax = 0;
//               value = fp16(d) · q. NOT the reference quantize_row_q8_0_ref (roundf, half away
//               from zero, x · (1/d)), which llama.cpp uses only where there is no AVX.
//   Q8_K        max = the signed value of largest |x| (quantize_row_q8_K_ref; the repacked
//               kernels pick +amax on a ±amax tie, which gives the same values: the sign flips
//               d and every q together); iscale = −127 / max; q = min(127, nearest_int(iscale · x))
//               (half to even); d = 1 / iscale (float32); value = d · q; all zero where amax = 0.
// What qeval computes with them: the float32 product of the dequantised activations and the
// dequantised weights, one GEMM per sequence, as for every format without CPU arithmetic. llama.cpp
// sums integer block products and scales each block in float32: the same values, summed in
// another order, so the two agree to float32 rounding, not bit for bit. Q4_1/Q5_1 weights also
// use the Q8_1 block sum rounded to fp16 for their minimum term, which the dequantised product
// does not (a relative difference of at most 2^-11 on that term).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "quant/formats/ggml/types.h"

namespace qeval {

enum class GgmlActivationType { f32, f16, q8_0, q8_1, q8_k };

// The type llama.cpp converts activations to for weights of type `weight` (the table above).
// Throws for a weight type qeval does not quantise to.
GgmlActivationType ggml_vec_dot_type(GgmlType weight);
std::string to_string(GgmlActivationType t);  // "Q8_0", "Q8_1", "Q8_K", "F16", "F32"
// Values per block along the row (1 for F16/F32).
std::int64_t block_elements(GgmlActivationType t);

// x [..., K] float32 (K a multiple of the block; CPU) -> the dequantised activations llama.cpp's
// dot product uses, same shape. Rows are rounded independently, threaded over rows. Non-finite
// inputs are refused (naming `where`): llama.cpp would turn them into garbage blocks.
at::Tensor ggml_activation_round_trip(const at::Tensor& x, GgmlActivationType t, const std::string& where);

// The same for one row of `k` values, written block by block as llama.cpp writes it (the block
// structs of quant/formats/ggml/blocks.h, then their dequantisation): the reference the
// tests hold the fast path to.
void ggml_activation_round_trip_reference(const float* x, float* out, std::int64_t k, GgmlActivationType t);

}  // namespace qeval
