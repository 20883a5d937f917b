// Orthogonal matrices for rotating a model's residual stream (QuaRot, SpinQuant): a randomised
// Hadamard matrix or a seeded random orthogonal one, in float64 so a rotated model is computed
// once with one rounding to fp32 at the end.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace qeval {

// A Hadamard matrix H (entries ±1, H Hᵀ = n I) of order n, or an undefined tensor when none is
// constructed for n. Built as a Kronecker product of Sylvester's (orders 2^k) and Paley's first
// construction (orders q + 1 for primes q ≡ 3 mod 4: 4, 8, 12, 20, 24, 32, 44, 48, ...), which
// covers every width of the models here (64, 576 = 12·12·4, 768 = 12·64, 1536 = 12·128, ...).
at::Tensor hadamard_matrix(std::int64_t n);
// How hadamard_matrix(n) factors n ("12 x 12 x 4"), or empty when it cannot.
std::string hadamard_factors(std::int64_t n);

// Q = diag(s) H / sqrt(n) with random signs s from `seed` (std::mt19937_64, so the same on every
// platform): orthogonal, and |Q_ij| = 1/sqrt(n) spreads every coordinate over all of them.
// Throws naming n when no Hadamard matrix of that order is constructed.
at::Tensor randomized_hadamard(std::int64_t n, std::uint64_t seed);

// A random orthogonal matrix (Haar-distributed): QR of a Gaussian matrix drawn from `seed`
// (std::mt19937_64 with Box–Muller, platform-independent), signs fixed by R's diagonal.
at::Tensor random_orthogonal(std::int64_t n, std::uint64_t seed);

}  // namespace qeval
