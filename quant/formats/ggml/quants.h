// llama.cpp's quantisers (the rules: quant/formats/ggml/types.h) and their dequantisers, one row at a time.
//
// quantize_row_<type>(x, blocks, n[, importance]): x[0..n) float32, n a multiple of the type's
// block (32 for Q4_0..Q8_0, IQ4_NL and MXFP4; 256 for the K-quants); writes n / block ggml blocks,
// the exact bytes llama.cpp's ggml_quantize_chunk writes for that row: without an importance
// matrix (the 3-argument form, or importance = nullptr), and with one, `importance` then holding n
// floats, one weight per column of the row (llama.cpp's imatrix entry for the tensor, as llama-quantize hands it over:
// loaders/checkpoints/imatrix_file.h). Q8_0 and MXFP4 ignore importance, as ggml does.
// dequantize_row_<type>(blocks, y, n): the inverse, y[0..n) (the GGUF reader's dequantisers).
// `blocks` needs no alignment. Plain C++ without ATen, so that other code can quantise single
// 32-value blocks (Q8_0, Q4_0: n = 32). Without importance blocks never depend on each other, so
// splitting rows across threads or calls cannot change a byte. With importance, Q4_0, Q4_1, Q5_0
// and Q5_1 weigh every block by the whole row's mean square (ggml's sigma2 over n_per_row), so a
// row must be given whole; the K-quants and IQ4_NL use their own super-block or block only.
//
// MXFP4 here is llama.cpp's MXFP4, not OCP's. Both take the block scale 2^(floor(log2 amax) - 2)
// and saturate at 6; they differ on exact ties between two FP4 values (in units of the scale):
// llama.cpp takes the first of the two in ggml's table order, i.e. the one nearer zero
// (0.75 -> 0.5, 1.75 -> 1.5, 3.5 -> 3), where the OCP Microscaling spec rounds to nearest even
// (0.75 -> 1, 1.75 -> 2, 3.5 -> 4); on the other ties (0.25, 1.25, 2.5, 5) they agree. qeval's
// OCP MXFP4 is the `mx` scheme with element e2m1 (presets mxfp4, mxfp4-weights; quant/formats/minifloat.h,
// docs/formats.md); these functions are llama.cpp's, for GGUF's MXFP4 type only
// (GgmlQuants.Mxfp4TiesDifferFromOcp shows the two side by side).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "quant/formats/ggml/types.h"

namespace qeval {

void quantize_row_q4_0(const float* x, void* blocks, std::int64_t n);
void quantize_row_q4_0(const float* x, void* blocks, std::int64_t n, const float* importance);
void quantize_row_q4_1(const float* x, void* blocks, std::int64_t n);
void quantize_row_q4_1(const float* x, void* blocks, std::int64_t n, const float* importance);
void quantize_row_q5_0(const float* x, void* blocks, std::int64_t n);
void quantize_row_q5_0(const float* x, void* blocks, std::int64_t n, const float* importance);
void quantize_row_q5_1(const float* x, void* blocks, std::int64_t n);
void quantize_row_q5_1(const float* x, void* blocks, std::int64_t n, const float* importance);
void quantize_row_q8_0(const float* x, void* blocks, std::int64_t n);
void quantize_row_q8_0(const float* x, void* blocks, std::int64_t n, const float* importance);
void quantize_row_q2_K(const float* x, void* blocks, std::int64_t n);
void quantize_row_q2_K(const float* x, void* blocks, std::int64_t n, const float* importance);
void quantize_row_q3_K(const float* x, void* blocks, std::int64_t n);
void quantize_row_q3_K(const float* x, void* blocks, std::int64_t n, const float* importance);
void quantize_row_q4_K(const float* x, void* blocks, std::int64_t n);
void quantize_row_q4_K(const float* x, void* blocks, std::int64_t n, const float* importance);
void quantize_row_q5_K(const float* x, void* blocks, std::int64_t n);
void quantize_row_q5_K(const float* x, void* blocks, std::int64_t n, const float* importance);
void quantize_row_q6_K(const float* x, void* blocks, std::int64_t n);
void quantize_row_q6_K(const float* x, void* blocks, std::int64_t n, const float* importance);
void quantize_row_iq4_nl(const float* x, void* blocks, std::int64_t n);
void quantize_row_iq4_nl(const float* x, void* blocks, std::int64_t n, const float* importance);
void quantize_row_mxfp4(const float* x, void* blocks, std::int64_t n);
void quantize_row_mxfp4(const float* x, void* blocks, std::int64_t n, const float* importance);

void dequantize_row_q4_0(const void* blocks, float* y, std::int64_t n);
void dequantize_row_q4_1(const void* blocks, float* y, std::int64_t n);
void dequantize_row_q5_0(const void* blocks, float* y, std::int64_t n);
void dequantize_row_q5_1(const void* blocks, float* y, std::int64_t n);
void dequantize_row_q8_0(const void* blocks, float* y, std::int64_t n);
void dequantize_row_q2_K(const void* blocks, float* y, std::int64_t n);
void dequantize_row_q3_K(const void* blocks, float* y, std::int64_t n);
void dequantize_row_q4_K(const void* blocks, float* y, std::int64_t n);
void dequantize_row_q5_K(const void* blocks, float* y, std::int64_t n);
void dequantize_row_q6_K(const void* blocks, float* y, std::int64_t n);
void dequantize_row_iq4_nl(const void* blocks, float* y, std::int64_t n);
void dequantize_row_mxfp4(const void* blocks, float* y, std::int64_t n);

// By type: rows × row_length values (row-major) into rows × row_length / block blocks,
// threaded over rows (at::parallel_for). Throws naming the type when row_length is not a
// multiple of its block or the type is not one qeval quantises to. importance: nullptr, or
// row_length weights used for every row (see quantize_row_<type>).
void quantize_rows_ggml(GgmlType type, const float* x, void* blocks, std::int64_t rows, std::int64_t row_length,
                        const float* importance = nullptr);
void dequantize_rows_ggml(GgmlType type, const void* blocks, float* y, std::int64_t rows, std::int64_t row_length);

// Whether ggml_quantize_chunk reads an importance matrix for type t: every type qeval quantises
// to but Q8_0 and MXFP4.
bool ggml_type_uses_importance(GgmlType t);

// w: [N, K] float32 (contiguous or not, CPU) -> the [N, K] float32 that a GGUF of type t holds
// for it: each row quantised as llama.cpp does, then dequantised. K must be a multiple of t's
// block (32 or 256); the error names the type, K and the block.
at::Tensor quantize_dequantize_ggml(const at::Tensor& w, GgmlType t);

// w: [N, K] float32 -> [N, K / block * block_bytes] uint8, the type's blocks row by row (the
// bytes of a GGUF tensor of that type).
at::Tensor quantize_ggml(const at::Tensor& w, GgmlType t);

// The same with llama.cpp's importance matrix, as llama-quantize applies it:
// importance [K] float32 weighs every row; [E, K] splits the N rows into E equal consecutive groups
// (the experts of a 3-D expert tensor [E, N / E, K] flattened), group e weighed by row e. Float32,
// CPU, finite (llama-quantize refuses non-finite values); the errors name the shapes.
at::Tensor quantize_dequantize_ggml(const at::Tensor& w, GgmlType t, const at::Tensor& importance);
at::Tensor quantize_ggml(const at::Tensor& w, GgmlType t, const at::Tensor& importance);

// "Q4_K", "F16", "F32" for any type a tensor may get.
std::string ggml_type_label(GgmlType t);
// Values per block (1 for F16/F32) and bytes of a [rows, cols] tensor of type t.
std::int64_t ggml_block_elements(GgmlType t);
std::int64_t ggml_tensor_bytes(GgmlType t, std::int64_t rows, std::int64_t cols);

// w [N, K] float32 -> the float32 a GGUF tensor of type t holds for it (F32: w itself; F16: each
// value rounded to binary16, nearest even).
at::Tensor ggml_round_trip(const at::Tensor& w, GgmlType t);

}  // namespace qeval
