// int8 linear: absmax int8 quantisation of the activations, the int8 GEMM and its dequantising
// epilogue as one op (DESIGN.md §5, §7) — what a QuantizedLinear on the kernel path computes.
//
//   y = ((float(Σ_k q_x[m, k] · w_q[n, k]) · a_scale[m / rows_per_scale]) · w_scales[n or 0]) + bias[n]
//
// q_x, a_scale: kernels/int8_quantize.h's absmax quantisation of x, one scale per group of
// rows_per_scale consecutive rows (1: per token; L: per sequence of L tokens), in float32 maths
// whatever x's dtype; each operation rounded to float32 on its own (kernels/int8_gemm.h), then
// rounded once to x's dtype. out_rows_per_scale > 0 then quantises and dequantises the output
// (the coarse scheme), one absmax scale per group of that many rows, on the values as stored.
//
// Layouts: x [M, K] (float32 on the CPU; float32, float16 or bfloat16 on a GPU), w_q [N, K] int8,
// w_scales [N] or [1] float32, bias [N] float32 or undefined → y [M, N] in x's dtype.
// Dispatch: on the CPU kernels/int8_quantize + kernels/int8_gemm; on a GPU the CUDA kernels
// (kernels/cuda/adapter_torch.h: fused quantiser, integer GEMM, epilogue), in a build with a CUDA
// LibTorch. The integer sums are exact on every backend, so fp32 outputs agree bit for bit.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace qeval::kernels {

at::Tensor int8_linear(const at::Tensor& x, std::int64_t rows_per_scale, const at::Tensor& w_q,
                       const at::Tensor& w_scales, const at::Tensor& bias, std::int64_t out_rows_per_scale = 0);

// Which implementation int8_linear runs for an [M, K] × [N, K] product on `device`, for records.
std::string int8_linear_path(const at::Device& device, std::int64_t m, std::int64_t n, std::int64_t k);

}  // namespace qeval::kernels
