// Absmax int8 quantisation of activations on the GPU, fused (one read of x per pass, scales and
// int8 values written by the same launch sequence). Plain C++ header.
//
// The maths is exactly the reference of DESIGN.md §5, in float32 whatever the input type:
//   s = max_{x ∈ group} |x| / 127   (a group of zeros gets s = 1)
//   q = clamp(rint(x / s), −127, 127)   (IEEE division, not a reciprocal multiply; rint rounds
//                                        half to even, as at::round does)
// fp16 and bf16 inputs are widened to float32 first (exactly), so the result equals the reference
// run on x.to(float32). NaN or infinite inputs give unspecified results.
#pragma once

#include <cstdint>

#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda {

// x: [M, K] f32, f16 or bf16, row-major contiguous; q: [M, K] int8;
// scales: [ceil(M / rows_per_scale)] f32, one per group of rows_per_scale consecutive rows:
//   rows_per_scale = 1  per token (one block per row, max and quantise fused in one launch)
//   rows_per_scale = L  per tensor for each sequence of L tokens (DESIGN.md: scales are per sequence)
//   rows_per_scale = M  one scale for the whole tensor
// Per token, x is read once (rows up to 16384 halves / 8192 floats are held in registers; longer
// rows are re-read from L1/L2). Groups of more than one row take two passes here: a
// block-reduced max with one atomic per block, then the quantisation (the max must be complete
// before any value is rounded; the second read mostly hits L2).
void absmax_quantize_int8(const void* x, FloatType x_type, std::int64_t m, std::int64_t k,
                          std::int64_t rows_per_scale, std::int8_t* q, float* scales, Stream stream = nullptr);

// The per-token kernel: registers (one read of x; the default) or reread (the block-per-row
// kernel of issue 6, which reads each row twice; still used for rows too long for registers).
// QEVAL_QUANTIZE_ROWS=reread selects it at start-up; the benchmark switches it to time the
// int8 linear as it was before the fused path. Process-wide.
enum class QuantizeRowsKernel { registers, reread };
void set_quantize_rows_kernel(QuantizeRowsKernel kernel);

// The same, and row_scales [M] (nullptr: not written) receives each row's scale, i.e. its group's:
// the per-row vector a GEMM epilogue broadcasts, whatever the grouping. With row_scales, groups of
// rows are quantised with one read of x as well when the tensor fits in the registers of the
// resident blocks (a cooperative kernel; about 17 MB on an H100/H200).
void absmax_quantize_int8_rows(const void* x, FloatType x_type, std::int64_t m, std::int64_t k,
                               std::int64_t rows_per_scale, std::int8_t* q, float* scales, float* row_scales,
                               Stream stream = nullptr);

// For the kernel benchmark (issue 33: the per-token quantiser took 16 µs of the int8 linear's 64 at
// Llama-7B's 2048 × 4096, half the copy bandwidth): the per-token register kernel with `warps`
// warps per row and `vectors` 16-byte vectors per thread, f16 x only. Returns false (and launches
// nothing) when that configuration cannot hold a row of K or x is not 16-byte vectorisable.
// Configurations: warps ∈ {1, 2, 4, 8} × vectors ∈ {1, 2, 4, 8}.
bool absmax_quantize_rows_f16_config(const void* x, std::int64_t m, std::int64_t k, int warps, int vectors,
                                     std::int8_t* q, float* scales, Stream stream = nullptr);

}  // namespace qeval::kernels::cuda
