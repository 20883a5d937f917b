// llama.cpp's Q8_0 and Q4_0 round trips (quantise as quantize_row_q8_0 / _q4_0, then dequantise),
// fused on AVX-512: a 32-value block in two registers, its scale in scalar float32 as ggml computes
// it, its values straight to float32 with no block struct between. The same bits as
// quant/ggml_legacy_quants.cpp's row functions (tests/quant/ggml_quants_test.cpp holds them to it
// on random rows with ties, zero and constant blocks, −0, fp16 scale edges and non-finite values),
// where those go a value at a time: a Llama-3-8B layer's gguf-q8_0 took 17× a float32 read pass.
// A block holding NaN or infinity takes the row functions (their conversions of such values are
// x86's, which they reproduce).
#pragma once

#include <cstdint>

// Callers run these where kernels::cpu::cpu_runs(CpuIsa::avx512) (kernels/cpu/cpu_isa.h).

namespace qeval {

// y[0, n) = dequantize(quantize(x[0, n))), n a multiple of 32.
void q8_0_round_trip_avx512(const float* x, float* y, std::int64_t n);
void q4_0_round_trip_avx512(const float* x, float* y, std::int64_t n);

}  // namespace qeval
