// The three reductions over one row of a vocabulary block of logits that blocked scoring needs
// (eval/vocab_scoring.h): the row's largest logit and where it first occurs, Σ exp(l − m) with the
// exponentials kept for later, and Σ p_f-weighted differences for the KL. One pass each over a row
// that stays in the core's cache, instead of LibTorch's element-wise ops over a whole block (each
// a pass through memory and a parallel region; they were a quarter of the LM head's time).
//
// Every variant gives the same bits: the scalar reference (any CPU) and the AVX2 and AVX-512
// variants (kernels/cpu/cpu_isa.h) compute each exponential with the same float32 operations
// (kernels/cpu/simd_row_math.inc) and every sum in float64 in one order: eight running sums, sum k taking
// the elements whose index is k mod 8 in index order, then the eight in order.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_isa.h"

namespace qeval::kernels::cpu {

struct VocabRowKernels {
  // The largest of x[0, n), n ≥ 1, and in *first the lowest index holding it. With a NaN in the
  // row the value is unspecified (the sums below are NaN then, whatever it is).
  float (*max_first)(const float* x, std::int64_t n, std::int64_t* first);
  // Σ_v e_v in float64, e_v = exp(x_v − m) in float32; e_v is written to e[v] when e is not null.
  double (*exp_sum)(const float* x, std::int64_t n, float m, float* e);
  // Σ_v (f_v − x_v) · e_v in float64, the difference and the product rounded to float32.
  double (*weighted_difference_sum)(const float* f, const float* e, const float* x, std::int64_t n);
};

// Variant `isa` (none: the scalar reference). Refused (c10::Error) where this CPU does not run it.
VocabRowKernels vocab_row_kernels(CpuIsa isa);

// The scalar reference, and its exponential: the Cephes polynomial of kernels/cpu/simd_row_math.inc for
// one float (0 below −87.34; inputs ≤ 0 are what the scorer sends).
VocabRowKernels vocab_row_reference();
float exp_lane(float x);

}  // namespace qeval::kernels::cpu
