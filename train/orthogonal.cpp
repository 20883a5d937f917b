#include "train/orthogonal.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "common/error.h"

namespace qeval::train {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::uint64_t transform_seed(std::uint64_t base, const std::string& tensor_name, std::int64_t axis) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the name
  for (unsigned char c : tensor_name) h = (h ^ c) * 0x100000001b3ULL;
  return splitmix64(splitmix64(base) ^ h ^ splitmix64(static_cast<std::uint64_t>(axis) + 1));
}

AxisTransform AxisTransform::random(std::int64_t n, std::uint64_t seed, std::int64_t dense_max) {
  return n <= dense_max ? dense(n, seed) : hadamard(n, seed);
}

AxisTransform AxisTransform::identity(std::int64_t n) {
  QEVAL_CHECK(n >= 1, "AxisTransform::identity: size must be >= 1, got {}", n);
  AxisTransform t;
  t.kind_ = TransformKind::identity;
  t.n_ = n;
  t.q_ = at::eye(n, at::kFloat);
  return t;
}

AxisTransform AxisTransform::dense(std::int64_t n, std::uint64_t seed) {
  QEVAL_CHECK(n >= 1 && n <= 16384, "AxisTransform::dense: size must be in [1, 16384], got {}", n);
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor g = at::randn({n, n}, gen, at::TensorOptions().dtype(at::kDouble));  // [n, n]
  auto [q, r] = at::linalg_qr(g, "reduced");
  // QR is unique only up to the signs of R's diagonal; fixing them makes Q Haar-distributed.
  at::Tensor d = r.diagonal().sign();
  d = at::where(d == 0, at::ones_like(d), d);
  AxisTransform t;
  t.kind_ = TransformKind::dense;
  t.n_ = n;
  t.q_ = (q * d.unsqueeze(0)).to(at::kFloat).contiguous();
  return t;
}

AxisTransform AxisTransform::hadamard(std::int64_t n, std::uint64_t seed) {
  QEVAL_CHECK(n >= 1, "AxisTransform::hadamard: size must be >= 1, got {}", n);
  at::Generator gen = at::detail::createCPUGenerator(seed);
  AxisTransform t;
  t.kind_ = TransformKind::hadamard;
  t.n_ = n;
  t.perm_ = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
  t.inv_perm_ = at::argsort(t.perm_);
  t.signs_ = at::randint(0, 2, {n}, gen, at::TensorOptions().dtype(at::kFloat)) * 2 - 1;
  for (int bit = 62; bit >= 0; --bit)
    if (n & (std::int64_t{1} << bit)) t.blocks_.push_back(std::int64_t{1} << bit);
  return t;
}

at::Tensor fwht(const at::Tensor& rows) {
  const std::int64_t R = rows.size(0), b = rows.size(1);
  QEVAL_CHECK(b >= 1 && (b & (b - 1)) == 0, "fwht: row length must be a power of two, got {}", b);
  at::Tensor x = rows;
  for (std::int64_t h = 1; h < b; h *= 2) {
    // Pairs (j, j + h) inside each run of 2h elements: the butterfly of the Sylvester order.
    at::Tensor v = x.reshape({R, b / (2 * h), 2, h});
    at::Tensor a = v.select(2, 0), c = v.select(2, 1);
    x = at::stack({a + c, a - c}, 2).reshape({R, b});
  }
  return x / std::sqrt(static_cast<double>(b));
}

at::Tensor AxisTransform::apply_rows(const at::Tensor& rows, bool transpose) const {
  if (kind_ != TransformKind::hadamard) {
    at::Tensor q = q_.to(rows.scalar_type());
    // rows are vectors x; Q x for each is rows · Qᵀ.
    return transpose ? at::matmul(rows, q) : at::matmul(rows, q.t());
  }
  auto blockwise = [&](const at::Tensor& x) {
    std::vector<at::Tensor> parts;
    std::int64_t offset = 0;
    for (std::int64_t b : blocks_) {
      parts.push_back(fwht(x.narrow(1, offset, b)));
      offset += b;
    }
    return parts.size() == 1 ? parts[0] : at::cat(parts, 1);
  };
  at::Tensor signs = signs_.to(rows.scalar_type());
  if (!transpose) return blockwise(rows.index_select(1, perm_) * signs);  // B S P x
  return (blockwise(rows) * signs).index_select(1, inv_perm_);             // Pᵀ S B y (B, S symmetric)
}

at::Tensor AxisTransform::apply(const at::Tensor& x, std::int64_t axis, bool transpose) const {
  TORCH_CHECK(axis >= 0 && axis < x.dim() && x.size(axis) == n_, "AxisTransform::apply: axis ", axis, " of a tensor of ",
              x.dim(), " dims must have size ", n_, ", got ", x.sizes());
  at::Tensor moved = x.movedim(axis, -1).contiguous();  // [..., n]
  at::Tensor out = apply_rows(moved.reshape({-1, n_}), transpose).reshape(moved.sizes());
  return out.movedim(-1, axis).contiguous();
}

at::Tensor AxisTransform::matrix() const { return apply(at::eye(n_, at::kDouble), 0, false); }

TensorTransform::TensorTransform(const std::vector<std::int64_t>& shape, TransformKind kind, std::uint64_t seed,
                                 std::int64_t dense_max) {
  // The seed is already per tensor; mix in the axis so equal-sized axes get different Qs.
  for (std::size_t a = 0; a < shape.size(); ++a) {
    const std::int64_t n = shape[a];
    const std::uint64_t s = transform_seed(seed, "", static_cast<std::int64_t>(a));
    if (n == 1 || kind == TransformKind::identity) {
      axes_.push_back(AxisTransform::identity(n));
    } else if (kind == TransformKind::hadamard) {
      axes_.push_back(AxisTransform::hadamard(n, s));
    } else {
      axes_.push_back(AxisTransform::random(n, s, dense_max));
    }
  }
}

at::Tensor TensorTransform::rotate(const at::Tensor& g) const {
  TORCH_CHECK(g.dim() == static_cast<std::int64_t>(axes_.size()), "TensorTransform::rotate: expected ", axes_.size(),
              " dims, got ", g.sizes());
  at::Tensor x = g;
  for (std::size_t a = 0; a < axes_.size(); ++a)
    if (axes_[a].size() > 1) x = axes_[a].apply(x, static_cast<std::int64_t>(a), false);
  return x;
}

at::Tensor TensorTransform::unrotate(const at::Tensor& u) const {
  TORCH_CHECK(u.dim() == static_cast<std::int64_t>(axes_.size()), "TensorTransform::unrotate: expected ", axes_.size(),
              " dims, got ", u.sizes());
  at::Tensor x = u;
  for (std::size_t a = 0; a < axes_.size(); ++a)
    if (axes_[a].size() > 1) x = axes_[a].apply(x, static_cast<std::int64_t>(a), true);
  return x;
}

}  // namespace qeval::train
