// Checks and exact widenings of the tensors a quantised checkpoint stores (codes, packed words,
// scales, zero points), shared by the checkpoint codecs (compressed_tensors.h, gptq.h, awq.h,
// bitsandbytes.h, fp8_block.h). `name` is the weight's name (e.g. "model.layers.0.mlp.up_proj"),
// `field` the stored tensor's own (e.g. "qzeros"): every error names both, what was expected and
// what was found.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qeval {

// "[4, 8]"
std::string shape_text(at::IntArrayRef shape);

// The tensor is defined, has exactly `shape` and one of `dtypes`; returns it contiguous.
at::Tensor stored_tensor(const at::Tensor& t, std::string_view name, std::string_view field,
                         const std::vector<std::int64_t>& shape, std::initializer_list<at::ScalarType> dtypes);

// A float32 copy of stored scales: float32 as is, float16 and bfloat16 widened (exactly: every
// fp16 / bf16 value is a float32 value); every value must be finite.
at::Tensor float32_scales(const at::Tensor& scales, std::string_view name, std::string_view field);

// E4M3 ("fn": no infinities) bytes [any shape] uint8 → float32 values, exactly (minifloat.h's
// element_value). With `finite_only`, a NaN code (S.1111.111) is an error naming the field
// (scales); otherwise it decodes to NaN (weights, as the libraries decode them).
at::Tensor e4m3_to_float32(const at::Tensor& bytes, std::string_view name, std::string_view field, bool finite_only);

// Every value of a float32 tensor finite (scales after any division), else an error naming the
// first index and value.
void check_finite(const at::Tensor& values, std::string_view name, std::string_view field);

}  // namespace qeval
