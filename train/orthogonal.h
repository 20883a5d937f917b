// Fixed random orthogonal transforms for OrthoAdam (DESIGN.md §8): one orthogonal matrix per
// tensor axis, so for a gradient G [out, in] the rotated gradient is G' = Q_out G Q_inᵀ, which
// on the row-major flattened tensor is the orthogonal matrix Q_out ⊗ Q_in. An N-D tensor gets
// one Q per axis (the Kronecker product of all of them); axes of size 1 get none.
//
// Per axis of size n:
//   n <= dense_max (4096 by default): dense Haar-random Q from the QR decomposition of an n×n
//     standard Gaussian (drawn in float64 from a CPU generator seeded per tensor and axis),
//     columns multiplied by sign(diag(R)) so Q is uniquely defined (and Haar distributed).
//   n > dense_max: a blocked randomised Hadamard transform Q = B · S · P, where P is a random
//     permutation, S random ±1 signs, and B block-diagonal with normalised Walsh–Hadamard
//     matrices H_b / sqrt(b) over the binary decomposition of n (n = 5000 → blocks of
//     4096, 512, 256, 128, 8, largest first). Every factor is square and orthogonal, so Q is
//     exactly orthogonal without padding; the permutation mixes coordinates across blocks.
//     Applying it costs O(n log n) per row and stores only signs and the permutation.
//   identity: Q = I through the dense code path (x · I is exact in floating point), used to
//     show OrthoAdam reduces to Adam bit for bit.
// Nothing here is stored in checkpoints: every Q is regenerated from (seed, tensor name, axis).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace qeval::train {

enum class TransformKind { identity, dense, hadamard };

class AxisTransform {
 public:
  // Dense when n <= dense_max, blocked randomised Hadamard otherwise.
  static AxisTransform random(std::int64_t n, std::uint64_t seed, std::int64_t dense_max = 4096);
  static AxisTransform dense(std::int64_t n, std::uint64_t seed);
  static AxisTransform hadamard(std::int64_t n, std::uint64_t seed);
  static AxisTransform identity(std::int64_t n);

  // x with Q (transpose = false) or Qᵀ (transpose = true) applied along `axis`:
  // y[..., i, ...] = Σ_j Q[i, j] x[..., j, ...]. Keeps x's dtype (Q is rounded to it).
  at::Tensor apply(const at::Tensor& x, std::int64_t axis, bool transpose) const;
  // Q as a dense float64 [n, n] matrix (tests; small n).
  at::Tensor matrix() const;

  TransformKind kind() const { return kind_; }
  std::int64_t size() const { return n_; }
  const std::vector<std::int64_t>& blocks() const { return blocks_; }

 private:
  at::Tensor apply_rows(const at::Tensor& rows /*[R, n]*/, bool transpose) const;

  TransformKind kind_ = TransformKind::identity;
  std::int64_t n_ = 0;
  at::Tensor q_;         // dense / identity: [n, n] float32
  at::Tensor signs_;     // hadamard: [n] float32, ±1
  at::Tensor perm_;      // hadamard: [n] int64, (P x)[i] = x[perm[i]]
  at::Tensor inv_perm_;  // hadamard: [n] int64
  std::vector<std::int64_t> blocks_;  // hadamard: powers of two summing to n, largest first
};

// In-place normalised fast Walsh–Hadamard transform of each row: rows [R, b], b a power of 2.
// Returns H_b rows / sqrt(b) (H_b symmetric and orthogonal after normalisation).
at::Tensor fwht(const at::Tensor& rows);

// One AxisTransform per axis of a tensor of `shape` (identity for axes of size 1). `kind`:
// dense = AxisTransform::random per axis (dense up to dense_max, Hadamard beyond); hadamard =
// Hadamard on every axis; identity = Q = I on every axis (through the dense code path).
class TensorTransform {
 public:
  TensorTransform() = default;
  TensorTransform(const std::vector<std::int64_t>& shape, TransformKind kind, std::uint64_t seed,
                  std::int64_t dense_max = 4096);
  at::Tensor rotate(const at::Tensor& g) const;    // g' = (⊗_axes Q) g
  at::Tensor unrotate(const at::Tensor& u) const;  // u = (⊗_axes Q)ᵀ u'
  const std::vector<AxisTransform>& axes() const { return axes_; }  // index = axis (size-1 axes: identity)

 private:
  std::vector<AxisTransform> axes_;
};

// A well-mixed 64-bit seed for (base seed, tensor name, axis): transforms of different tensors
// and axes are independent, and the same name always gets the same transform.
std::uint64_t transform_seed(std::uint64_t base, const std::string& tensor_name, std::int64_t axis);

}  // namespace qeval::train
