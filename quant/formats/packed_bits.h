// Dense LSB-first bit streams in 32-bit words, the packing compressed-tensors 0.20
// (`pack_to_int32`) and GPTQ (AutoGPTQ 0.7.1 `QuantLinear.pack`, GPTQModel) write:
//
//   stream bit j is bit (j mod 32) of word ⌊j / 32⌋ (bit 0 = the LSB); field i of a stream of
//   b-bit fields is stream bits [i·b, i·b + b), its low bit first.
//
// For b = 2, 4, 8 no field crosses a word; for b = 3, 5, 6, 7 fields cross word boundaries (3
// bits: 32 fields fill 3 words exactly, AutoGPTQ's hand-written 3-bit layout is this stream).
// A stream of n fields takes ceil(n·b / 32) words; the spare high bits of the last are not read.
// The words of one stream sit `stride` int32 apart (1 along a row, the row length down a column).
#pragma once

#include <cstdint>

namespace qeval {

inline std::uint32_t stream_field(const std::int32_t* words, std::int64_t stride, std::int64_t i, int bits) {
  const std::int64_t bit = i * bits, w = bit / 32;
  const int off = static_cast<int>(bit % 32);
  std::uint64_t v = static_cast<std::uint32_t>(words[w * stride]) >> off;
  if (off + bits > 32) v |= static_cast<std::uint64_t>(static_cast<std::uint32_t>(words[(w + 1) * stride])) << (32 - off);
  return static_cast<std::uint32_t>(v & ((1u << bits) - 1u));
}

// Words for a stream of n b-bit fields.
inline std::int64_t stream_words(std::int64_t n, int bits) { return (n * bits + 31) / 32; }

}  // namespace qeval
