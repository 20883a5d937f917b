// 4-bit zero-point quantisation of a weight matrix in one threaded pass (DESIGN.md §5; issue 50):
// each group's min and max, its scale and zero point, the codes and their packing, with the same
// bits as quant/quantize.h's zeropoint4_params + zeropoint4_quantize + kernels::pack_u4 (tested):
//   s = (max − min) / 15, z = round_half_even(−min / s)      (IEEE division)
//   a constant group: s = |c| (1 for c = 0), z = 1 for c < 0 else 0
//   q = clamp(round_half_even(x / s) + z, 0, 15), two codes a byte, the even k in the low nibble
// Groups run along K (group_size; the last group may be shorter), or cover the whole matrix
// (whole_tensor: one scale and zero point, written for every row). The ATen composition made
// seven passes and six temporaries of the weight's size: a Llama-3-8B's 4-bit schemes spent
// ~40 s each quantising on a 2-core CPU.
// Layouts: w [N, K] float32, CPU → packed [N, ceil(K/2)] uint8, scales and zeros
// [N, G] float32 (G = ceil(K / group_size); 1 with whole_tensor).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace qeval::kernels {

struct W4Rows {
  at::Tensor packed;  // [N, ceil(K/2)] uint8
  at::Tensor scales;  // [N, G] float32
  at::Tensor zeros;   // [N, G] float32
  // Whether every value of w was finite (seen by the min/max pass; the codes of a non-finite
  // weight mean nothing): callers need no finiteness pass of their own.
  bool finite = true;
};

W4Rows quantize_w4_rows(const at::Tensor& w, std::int64_t group_size, bool whole_tensor);

namespace cpu {
// The widest variant the CPU runs is used (CPUID: AVX-512 as kernels/cpu/cpu_isa.h defines it,
// then AVX2, then the portable loops); each alone, so tests cover every one this machine runs (a
// vector variant refuses a CPU without its instructions).
bool w4_quantize_avx2_available();
W4Rows quantize_w4_rows_portable(const at::Tensor& w, std::int64_t group_size, bool whole_tensor);
W4Rows quantize_w4_rows_avx2(const at::Tensor& w, std::int64_t group_size, bool whole_tensor);
W4Rows quantize_w4_rows_avx512(const at::Tensor& w, std::int64_t group_size, bool whole_tensor);
}  // namespace cpu

}  // namespace qeval::kernels
