// llama.cpp's weight quantisation types that qeval writes, bit for bit as llama.cpp writes them.
//
// Pinned to the llama.cpp that llama-cpp-python 0.3.36 vendors, commit 0c1e57098 (ggml/src/
// ggml-quants.c): every quantiser here equals `ggml_quantize_chunk(type, ..., imatrix = NULL)`
// byte for byte. For every type but IQ4_NL that is `quantize_row_<type>_ref`; for IQ4_NL it is
// `quantize_iq4_nl`, which searches 15 scales (ntry = 7) with weights x², not the reference's
// single-scale `quantize_row_iq4_nl_ref` (ntry = -1). Given an importance matrix they equal
// `ggml_quantize_chunk(type, ..., imatrix)` byte for byte too: `quantize_row_<type>_impl` with
// quant_weights (other searches and weights: legacy_quants.cpp, k_quants.cpp, iq4_nl.cpp), except
// Q8_0 and MXFP4, which ggml quantises without it. Tests: tests/quant/ggml_quants_test.cpp,
// tests/quant/ggml_importance_test.cpp.
//
// The block layouts (ggml-common.h) are quant/formats/ggml/blocks.h, beside their dequantisers:
// what qeval writes, its GGUF reader reads with the same code.
//
// Every rounding rule, per type (x a weight, blocks of 32 or super-blocks of 256):
//   Q8_0          d = amax/127, q = roundf(x * (1/d))                  half away from zero
//   Q4_0, Q5_0    d = max/-8 (max/-16, max = the signed value of largest |x|),
//                 q = trunc(x * (1/d) + 8.5) (16.5), clamped to 15 (31) half up
//   Q4_1, Q5_1    d = (max - min)/15 (31), q = trunc((x - min) * (1/d) + 0.5)       half up
//   K-quants      nearest_int (1.5·2^23 magic addition): half to even, scales found by
//                 ggml's searches (make_qkx2_quants for Q2_K/Q4_K/Q5_K, make_q3_quants for
//                 Q3_K, make_qx_quants for Q6_K) in float32 sums in ggml's order
//   IQ4_NL        nearest grid value, a tie going to the lower one; 15-scale search
//   MXFP4         e = floor(log2f(amax)) - 2, nearest doubled E2M1 value, a tie going to the
//                 first in ggml's table order (0, 1, 2, 3, 4, 6, 8, 12, then the negatives):
//                 towards zero, NOT OCP's round-to-nearest-even (see quants.h)
// fp16 scales are rounded to nearest even (ggml_compute_fp32_to_fp16; NaN -> 0x7e00 | sign).
// The sums are float32 in ggml's order, and these files are compiled without floating-point
// contraction: a fused multiply-add changes the last bit of a sum, and with it a chosen scale.
// (llama.cpp on x86-64 compiles ggml-quants.c without FMA; an aarch64 build of llama.cpp may
// contract, and then writes other bytes than qeval and than itself on x86-64.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/formats/ggml/blocks.h"  // GgmlType, the block structs

namespace qeval {

// What one quantisation type is: its ggml id, llama.cpp's name for it (as `ggml_type_name`),
// the values per block and the bytes per block.
struct GgmlQuantType {
  GgmlType type;
  const char* name;
  int block_elements;
  int block_bytes;
};

// The types qeval quantises to, in ggml id order: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
// Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4.
const std::vector<GgmlQuantType>& ggml_quant_types();

// The entry of `type`; throws naming the type and listing the quantisable ones when qeval
// does not quantise to it.
const GgmlQuantType& ggml_quant_type(GgmlType type);

// The type named `name` (case-insensitive: "q4_k" or "Q4_K"); throws listing the names.
GgmlType ggml_quant_type_from_name(const std::string& name);

// "Q4_0, Q4_1, ...": for error messages.
std::string ggml_quant_type_names();

// float32 -> IEEE binary16 bits, rounded to nearest even; overflow gives ±inf; every NaN
// gives 0x7e00 with the sign kept. Equal to ggml's GGML_FP32_TO_FP16 for every input.
ggml_half fp32_to_fp16(float f);

}  // namespace qeval
