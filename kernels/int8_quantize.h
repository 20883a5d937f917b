// Absmax int8 quantisation of activation rows: the step before int8_gemm (DESIGN.md §5, §7).
// Same maths as quant/quantize.h, bit for bit (tested):
//   s = max_{x ∈ group} |x| / 127   (a group of zeros gets s = 1)
//   q = clamp(round_half_even(x / s), −127, 127)   (IEEE division, not a reciprocal multiply)
// Groups are runs of `rows_per_scale` consecutive rows:
//   rows_per_scale = 1  per token;   = L  per tensor for each sequence of L tokens (scales are
//   per sequence, DESIGN.md §5);   = M  one scale for the whole matrix.
// Layouts: x [M, K] float32 → q [M, K] int8, scales [ceil(M / rows_per_scale)] float32.
// NaN or infinite inputs give unspecified codes. No build flags in this header.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace qeval::kernels {

struct Int8Rows {
  at::Tensor q;       // [M, K] int8
  at::Tensor scales;  // [ceil(M / rows_per_scale)] float32
};

Int8Rows quantize_int8_rows(const at::Tensor& x, std::int64_t rows_per_scale);

// quantize_int8_rows(x, M) (one scale for the whole matrix) when the caller has read x whole
// already and knows `max_abs` = max |x|: the same codes and scale in one pass over x instead of two.
// `max_abs` must be exactly that maximum (a maximum is exact in any order) and finite.
Int8Rows quantize_int8_matrix_with_max_abs(const at::Tensor& x, float max_abs);

// x ← float(q) · s in place, with q and s as quantize_int8_rows(x, rows_per_scale) gives them: the
// round trip of a scheme's output quantisation, equal bit for bit to int8_dequantize(q, s) of
// quant/quantize.h, in two passes over x and no int8 tensor. x: contiguous float32 [M, K], CPU.
void fake_quantize_int8_rows_(at::Tensor& x, std::int64_t rows_per_scale);

// One scale per row of q, [M] (what int8_gemm takes as a_scale), from a group-wise result.
at::Tensor scales_per_row(const Int8Rows& rows, std::int64_t rows_per_scale);

}  // namespace qeval::kernels
