// The quantised key/value cache in tensor operations: the same round trip as quant/kv_cache.h's
// rows, written with ATen operations so that it runs wherever the model does (a GPU, or a CPU
// placement in another dtype). The float32 CPU placement keeps the row kernels (fused, faster);
// tests/quant/kv_cache_test.cpp holds the two equal bit for bit on random rows with ties, zeros,
// constant rows and float32 subnormals.
//
// Every operation is one that rounds the same on every device: IEEE division by a tensor (never by
// a host scalar, which CUDA turns into a reciprocal multiply), round-half-to-even (at::round),
// truncation, min/max, exact power-of-two arithmetic, float16 conversion with round-to-nearest-even.
// ggml's roundf (half away from zero) is trunc(y) plus sign(y) where |y − trunc(y)| ≥ 0.5 (the
// fraction is exact). Values are rounded in float32; the result is cast back to the input's dtype,
// as a cache read back into a float16 / bfloat16 attention would be.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "quant/schemes/spec.h"

namespace qeval {

// llama.cpp's block along head_dim for q8_0 and q4_0 caches (QK8_0 = QK4_0 = 32).
constexpr std::int64_t kKvGgmlBlock = 32;

// llama.cpp's rotation block along head_dim (quant/schemes/spec.h): K's, the largest power of two from
// 64 that divides head_dim; V's, 64. Requires head_dim % 64 == 0.
std::int64_t kv_rotation_block(std::int64_t head_dim, bool is_key);

// x [..., hd] of any floating dtype and device → every row quantised and dequantised under spec's
// format (and rotation, as K's rows when is_key), same shape, dtype and device. keep_first is not
// applied here (the caller keeps positions).
at::Tensor kv_round_trip_tensor(const at::Tensor& x, const KvCacheSpec& spec, bool is_key);

}  // namespace qeval
