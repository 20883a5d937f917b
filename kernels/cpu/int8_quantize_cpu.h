// CPU backend of kernels/int8_quantize.h; x is checked and contiguous [M, K] float32.
#pragma once

#include "kernels/int8_quantize.h"

namespace qeval::kernels::cpu {

Int8Rows quantize_int8_rows_cpu(const at::Tensor& x, std::int64_t rows_per_scale);
// kernels::quantize_int8_matrix_with_max_abs on the CPU (checked by the caller).
Int8Rows quantize_int8_matrix_with_max_abs_cpu(const at::Tensor& x, float max_abs);

// Whether the AVX-512 variant runs on this CPU (else the AVX2 one where the CPU has AVX2, else the
// portable loops).
bool int8_quantize_uses_avx512();
bool int8_quantize_avx2_available();

// max |x[k]| over K floats (0 for K = 0), the best variant this CPU runs: the int8 scales', and
// those of the floating-point formats (quant/float_quantize.cpp). NaN when a value is NaN, so a
// scale computed from it is finite exactly when its values are.
float row_absmax(const float* x, std::int64_t K);

// max |x| over n floats in one threaded pass at memory speed (chunks of 64K on every thread, each
// chunk's row_absmax, combined in chunk order): the read's finiteness check of every weight
// (model/weights.cpp) and the per-tensor scales of the floating-point formats. NaN when a value
// is NaN, infinite when one is and none is NaN; a maximum is exact in any order.
float parallel_absmax(const float* x, std::int64_t n);

// The portable loops alone, so tests cover both variants on one CPU.
Int8Rows quantize_int8_rows_portable(const at::Tensor& x, std::int64_t rows_per_scale);
// The AVX2 variant alone (refuses without AVX2), for the same reason.
Int8Rows quantize_int8_rows_avx2(const at::Tensor& x, std::int64_t rows_per_scale);

// kernels::fake_quantize_int8_rows_ on the CPU (x contiguous float32 [M, K], checked by the
// caller), the best variant this CPU runs; then the portable and AVX2 variants alone, for tests.
void fake_quantize_int8_rows_cpu_(at::Tensor& x, std::int64_t rows_per_scale);
void fake_quantize_int8_rows_portable_(at::Tensor& x, std::int64_t rows_per_scale);
void fake_quantize_int8_rows_avx2_(at::Tensor& x, std::int64_t rows_per_scale);

}  // namespace qeval::kernels::cpu
