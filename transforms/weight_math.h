// Small helpers the transforms share: they compute in float64 and round to fp32 once.
#pragma once

#include <ATen/ATen.h>

namespace qeval {

inline at::Tensor f64(const at::Tensor& t) { return t.to(at::kDouble); }
inline at::Tensor f32(const at::Tensor& t) { return t.to(at::kFloat).contiguous(); }

}  // namespace qeval
