// bitsandbytes checkpoints as transformers' save_pretrained writes them (bitsandbytes 0.50,
// Params4bit / Int8Params state dicts). For an [N, K] weight:
//
//   4-bit (nf4, fp4)   weight        [ceil(N·K / 2), 1] uint8: the row-major N·K codes, two per byte,
//                                    the HIGH nibble first (element 2i in bits 4–7, 2i + 1 in bits 0–3)
//                      absmax        [ceil(N·K / B)] float32, one per block of B = blocksize codes
//                                    (the last block may be short); or, nested (double-quantised):
//                      absmax        [ceil(N·K / B)] uint8 codes of the 8-bit nested table
//                      nested_absmax [ceil(nblocks / B2)] float32, nested_quant_map [256] float32,
//                      nested_offset (quant_state JSON), B2 = nested_blocksize
//                      quant_map     [16] float32 (bitsandbytes reads its own table, below)
//   int8 (LLM.int8)    weight        [N, K] int8 codes, SCB [N] float32 row absmax
//
//   4-bit:  W[i] = table[code_i] · absmax[⌊i / B⌋]                      (float32, one rounding)
//   nested: absmax[j] = nested_quant_map[code_j] · nested_absmax[⌊j / B2⌋] + nested_offset
//           (float32: product, then sum, as dequantize_blockwise then `absmax += offset`)
//   int8:   W[n, k] = (code · SCB[n]) · f32(1/127)   (int8_vectorwise_dequant: two roundings,
//           the constant 7.874015718698502e-3 as float32)
//
// The tables are get_4bit_type's: nf4 the 16 NormalFloat constants, fp4 bitsandbytes' own
// E2M1-like map [0, 0.0625, 8, 12, 4, 6, 2, 3, 0, −0.0625, −8, −12, −4, −6, −2, −3] / 12 in float32
// (code 8 is +0: the source writes it as the Python integer -0).
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <string_view>

namespace qeval {

enum class BnbQuantType { nf4, fp4 };

// get_4bit_type(quant_type) in float32.
const std::array<float, 16>& bnb_4bit_table(BnbQuantType type);

struct Bnb4bitWeight {
  at::Tensor weight;                             // packed codes, uint8
  at::Tensor absmax;                             // float32, or uint8 when nested
  at::Tensor nested_absmax, nested_quant_map;    // nested only
  float nested_offset = 0.0f;
  std::int64_t blocksize = 64, nested_blocksize = 256;
  BnbQuantType quant_type = BnbQuantType::nf4;
  bool nested() const { return nested_absmax.defined(); }
};

// [N, K] float32.
at::Tensor bnb_dequantize_4bit(const Bnb4bitWeight& w, std::int64_t N, std::int64_t K, std::string_view name);
at::Tensor bnb_dequantize_int8(const at::Tensor& weight, const at::Tensor& scb, std::int64_t N, std::int64_t K,
                               std::string_view name);

}  // namespace qeval
