// The Hessian of a linear layer's reconstruction error that GPTQ solves with (quant/calibration/gptq_solve.h):
//
//   H = 2 / n · Σ x xᵀ   over every row x of every input the layer sees during calibration,
//
// n the number of sequences (llm-compressor 0.14's accumulate_hessian and AutoGPTQ 0.7.1's
// add_batch count one sample per sequence of a [B, L, K] input and one per call for a 2-D input).
// GPTQ's codes do not depend on the scale of H (the damping is relative to mean diag H and every
// update is a ratio of its Cholesky factors), so n only keeps the numbers readable. The sum is
// kept in float64 and handed over in float32 (the references' dtype): llm-compressor 0.14 sums
// (√2 x)(√2 x)ᵀ in float32 and divides by n at the solve, AutoGPTQ rescales a float32 running mean
// on every batch, whose rounding depends on the batch split; the float64 sum does neither.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace qeval {

class HessianAccumulator {
 public:
  explicit HessianAccumulator(std::int64_t in_features);

  // x: [B, L, K] (B sequences) or [T, K] (one sample) of any float dtype, on the CPU.
  void add(const at::Tensor& x);

  // [K, K] float32, 2/n Σ x xᵀ; zeros before any input.
  at::Tensor hessian() const;
  std::int64_t samples() const { return samples_; }
  std::int64_t rows() const { return rows_; }

 private:
  at::Tensor sum_;  // [K, K] float64
  std::int64_t samples_ = 0, rows_ = 0;
};

}  // namespace qeval
