#include "transforms/orthogonal.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/error.h"

namespace qeval {
namespace {

bool is_prime(std::int64_t q) {
  if (q < 2) return false;
  for (std::int64_t d = 2; d * d <= q; ++d)
    if (q % d == 0) return false;
  return true;
}

bool is_power_of_two(std::int64_t n) { return n >= 1 && (n & (n - 1)) == 0; }

// Orders of the factors, smallest Paley factor first; empty when n has no such factorisation.
std::vector<std::int64_t> factorise(std::int64_t n) {
  if (is_power_of_two(n)) return {n};
  for (std::int64_t order = 12; order <= n; ++order) {  // Paley orders that are not powers of two
    const std::int64_t q = order - 1;
    if (n % order != 0 || is_power_of_two(order) || q % 4 != 3 || !is_prime(q)) continue;
    std::vector<std::int64_t> rest = factorise(n / order);
    if (rest.empty()) continue;
    if (rest == std::vector<std::int64_t>{1}) rest.clear();
    rest.insert(rest.begin(), order);
    return rest;
  }
  return {};
}

// Paley construction I: H = I + S with S = [[0, 1ᵀ], [−1, C]], C_ij = χ(j − i) (Legendre symbol
// mod q). For q ≡ 3 mod 4, C is skew-symmetric, so S is too and H Hᵀ = (q + 1) I.
at::Tensor paley(std::int64_t order) {
  const std::int64_t q = order - 1;
  std::vector<int> chi(static_cast<std::size_t>(q), -1);
  chi[0] = 0;
  for (std::int64_t x = 1; x < q; ++x) chi[static_cast<std::size_t>((x * x) % q)] = 1;
  at::Tensor h = at::zeros({order, order}, at::kDouble);
  auto a = h.accessor<double, 2>();
  for (std::int64_t j = 1; j < order; ++j) a[0][j] = 1, a[j][0] = -1;
  for (std::int64_t i = 0; i < q; ++i)
    for (std::int64_t j = 0; j < q; ++j) a[i + 1][j + 1] = chi[static_cast<std::size_t>(((j - i) % q + q) % q)];
  return h + at::eye(order, at::kDouble);
}

at::Tensor sylvester(std::int64_t n) {
  at::Tensor h = at::ones({1, 1}, at::kDouble);
  while (h.size(0) < n) h = at::cat({at::cat({h, h}, 1), at::cat({h, -h}, 1)}, 0);
  return h;
}

}  // namespace

std::string hadamard_factors(std::int64_t n) {
  std::string out;
  for (std::int64_t f : factorise(n)) out += (out.empty() ? "" : " x ") + std::to_string(f);
  return out;
}

at::Tensor hadamard_matrix(std::int64_t n) {
  const std::vector<std::int64_t> factors = factorise(n);
  if (factors.empty()) return {};
  at::Tensor h = at::ones({1, 1}, at::kDouble);
  for (std::int64_t f : factors) h = at::kron(h, is_power_of_two(f) ? sylvester(f) : paley(f));
  return h;
}

at::Tensor randomized_hadamard(std::int64_t n, std::uint64_t seed) {
  at::Tensor h = hadamard_matrix(n);
  QEVAL_CHECK(h.defined(),
              "rotate: no Hadamard matrix of order {} is built here (orders 2^k times Paley orders q+1, q prime = 3 mod 4); "
              "use rotate:kind=orthogonal", n);
  std::mt19937_64 rng(seed);
  at::Tensor signs = at::empty({n, 1}, at::kDouble);
  auto s = signs.accessor<double, 2>();
  for (std::int64_t i = 0; i < n; ++i) s[i][0] = (rng() >> 63) ? -1.0 : 1.0;
  return signs * h / std::sqrt(static_cast<double>(n));
}

at::Tensor random_orthogonal(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  at::Tensor g = at::empty({n, n}, at::kDouble);
  double* p = g.data_ptr<double>();
  for (std::int64_t i = 0; i < n * n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform())), t = 2.0 * M_PI * uniform();
    p[i] = r * std::cos(t);
    if (i + 1 < n * n) p[i + 1] = r * std::sin(t);
  }
  auto qr = at::linalg_qr(g);
  at::Tensor q = std::get<0>(qr), r = std::get<1>(qr);
  return q * at::sign(r.diagonal()).unsqueeze(0);
}

}  // namespace qeval
