#include "quant/calibration/gptq_solve.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"

namespace qeval {

std::string to_string(GptqOrder v) { return v == GptqOrder::none ? "none" : "descending_hessian"; }
std::string to_string(GptqGroupParams v) { return v == GptqGroupParams::original ? "original" : "updated"; }
std::string to_string(GptqReference v) { return v == GptqReference::llm_compressor ? "llm-compressor" : "autogptq"; }

namespace {

// One group's scale and (unsigned) zero point under the reference's rule (gptq_solve.h).
template <typename T>
struct GroupParams {
  T scale = 1;
  T zero = 0;
};

template <typename T>
class Quantizer {
 public:
  Quantizer(const GptqOptions& o)
      : reference_(o.reference), symmetric_(o.symmetric), offset_(static_cast<T>(std::int64_t{1} << (o.bits - 1))),
        qmax_unsigned_(static_cast<T>((std::int64_t{1} << o.bits) - 1)) {}

  GroupParams<T> params(const T* x, std::int64_t n) const {
    T lo = 0, hi = 0;  // min(min x, 0), max(max x, 0)
    for (std::int64_t i = 0; i < n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    GroupParams<T> p;
    if (reference_ == GptqReference::llm_compressor) {
      const T qmin = -offset_, qmax = offset_ - 1, range = qmax - qmin;
      if (symmetric_) {
        p.scale = std::max(std::abs(lo), std::abs(hi)) / (range / T(2));
        p.zero = offset_;  // signed zero 0
      } else {
        p.scale = (hi - lo) / range;
        // An all-zero group divides 0 by 0: NaN, which compressed-tensors casts to int8 as 0.
        const T z = p.scale == 0 ? T(0) : std::nearbyint(std::clamp(qmin - lo / p.scale, qmin, qmax));
        p.zero = z + offset_;
      }
      if (p.scale == 0) p.scale = std::numeric_limits<T>::epsilon();
      return p;
    }
    if (symmetric_) {
      hi = std::max(std::abs(lo), hi);
      if (lo < 0) lo = -hi;
    }
    if (lo == 0 && hi == 0) lo = -1, hi = 1;
    p.scale = (hi - lo) / qmax_unsigned_;
    p.zero = symmetric_ ? (qmax_unsigned_ + 1) / 2 : std::nearbyint(-lo / p.scale);
    return p;
  }

  // w → its unsigned code, and ŵ.
  T quantize(T w, const GroupParams<T>& p, std::uint8_t* code) const {
    if (reference_ == GptqReference::llm_compressor) {
      const T qmin = -offset_, qmax = offset_ - 1;
      const T z = p.zero - offset_;
      T v = w / p.scale;
      if (!symmetric_) v += z;
      const T q = std::nearbyint(std::clamp(v, qmin, qmax));
      *code = static_cast<std::uint8_t>(q + offset_);
      return symmetric_ ? q * p.scale : (q - z) * p.scale;
    }
    const T q = std::clamp(std::nearbyint(w / p.scale) + p.zero, T(0), qmax_unsigned_);
    *code = static_cast<std::uint8_t>(q);
    return p.scale * (q - p.zero);
  }

 private:
  GptqReference reference_;
  bool symmetric_;
  T offset_;         // 2^(b−1)
  T qmax_unsigned_;  // 2^b − 1
};

// Columns by descending value, equal values in column order.
std::vector<std::int64_t> descending_order(const at::Tensor& diagonal) {
  const at::Tensor d = diagonal.to(at::kDouble).contiguous();
  const double* v = d.data_ptr<double>();
  std::vector<std::int64_t> order(static_cast<std::size_t>(d.numel()));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  std::stable_sort(order.begin(), order.end(), [v](std::int64_t a, std::int64_t b) { return v[a] > v[b]; });
  return order;
}

template <typename T>
GptqResult solve(const at::Tensor& weight, const at::Tensor& hessian, const GptqOptions& o) {
  const std::int64_t N = weight.size(0), K = weight.size(1);
  const std::int64_t gs = o.group_size > 0 ? o.group_size : K;
  const std::int64_t G = (K + gs - 1) / gs;
  const Quantizer<T> quantizer(o);
  const at::Tensor original = weight.contiguous();
  at::Tensor H = hessian.clone().contiguous();

  // Activation order before the dead columns' fix (llm-compressor) or after it (AutoGPTQ).
  std::vector<std::int64_t> perm(static_cast<std::size_t>(K));
  for (std::int64_t j = 0; j < K; ++j) perm[j] = j;
  const bool descending = o.order == GptqOrder::descending_hessian;
  if (descending && o.reference == GptqReference::llm_compressor) perm = descending_order(H.diagonal());

  at::Tensor W = original.clone();
  const at::Tensor dead = H.diagonal() == 0;
  GptqResult r;
  r.dead_columns = dead.sum().item<std::int64_t>();
  if (r.dead_columns > 0) {
    H.diagonal().masked_fill_(dead, 1);
    W.masked_fill_(dead.unsqueeze(0), 0);
  }
  if (descending && o.reference == GptqReference::autogptq) perm = descending_order(H.diagonal());

  const at::Tensor index = at::tensor(perm, at::kLong);
  at::Tensor Wp = descending ? W.index_select(1, index).contiguous() : W;
  at::Tensor Hp = descending ? H.index_select(0, index).index_select(1, index).contiguous() : H;

  // Dampen, then U = chol(H⁻¹)ᵀ (upper); identity when H is not positive definite.
  const at::Tensor damp = Hp.diagonal().mean() * static_cast<T>(o.dampening);
  Hp.diagonal().add_(damp);
  auto [L, info] = at::linalg_cholesky_ex(Hp, /*upper=*/false, /*check_errors=*/false);
  at::Tensor U;
  if (info.item<int>() == 0) {
    U = at::linalg_cholesky(at::cholesky_inverse(L), /*upper=*/true).contiguous();
  } else {
    U = at::eye(K, Hp.options());
    r.fell_back_to_rtn = true;
  }

  // Group of each position in the order of quantisation, and the parameters.
  std::vector<std::int64_t> group_at(static_cast<std::size_t>(K));
  const bool updated = o.group_params == GptqGroupParams::updated && o.group_size > 0;
  for (std::int64_t j = 0; j < K; ++j) group_at[j] = (updated ? j : perm[j]) / gs;
  std::vector<GroupParams<T>> params(static_cast<std::size_t>(N * G));
  if (!updated) {
    const T* w0 = original.data_ptr<T>();
    for (std::int64_t row = 0; row < N; ++row)
      for (std::int64_t g = 0; g < G; ++g)
        params[row * G + g] = quantizer.params(w0 + row * K + g * gs, std::min(gs, K - g * gs));
  }

  at::Tensor codes_p = at::empty({N, K}, at::kByte);
  at::Tensor q_p = at::empty({N, K}, Wp.options());
  std::uint8_t* codes = codes_p.data_ptr<std::uint8_t>();
  T* qv = q_p.data_ptr<T>();
  const T* u = U.data_ptr<T>();
  double loss = 0;
  for (std::int64_t i1 = 0; i1 < K; i1 += o.block_size) {
    const std::int64_t i2 = std::min(i1 + o.block_size, K), B = i2 - i1;
    at::Tensor W1 = Wp.slice(1, i1, i2).contiguous();
    at::Tensor E1 = at::zeros({N, B}, Wp.options());
    T* w1 = W1.data_ptr<T>();
    T* e1 = E1.data_ptr<T>();
    const T* wp = Wp.data_ptr<T>();  // the columns of this block as the previous blocks left them
    for (std::int64_t i = 0; i < B; ++i) {
      const std::int64_t j = i1 + i, g = group_at[j];
      if (updated && j % gs == 0)
        for (std::int64_t row = 0; row < N; ++row)
          params[row * G + g] = quantizer.params(wp + row * K + j, std::min(gs, K - j));
      const T d = u[j * K + j];
      const T* u_row = u + j * K + i1;  // U[j, i1 + c]
      for (std::int64_t row = 0; row < N; ++row) {
        T* w_row = w1 + row * B;
        const T w = w_row[i];
        const T q = quantizer.quantize(w, params[row * G + g], codes + row * K + j);
        qv[row * K + j] = q;
        const T e = (w - q) / d;
        e1[row * B + i] = e;
        loss += static_cast<double>(e) * static_cast<double>(e);
        for (std::int64_t c = i; c < B; ++c) w_row[c] -= e * u_row[c];
      }
    }
    if (i2 < K) Wp.slice(1, i2).sub_(at::matmul(E1, U.slice(0, i1, i2).slice(1, i2)));
  }

  at::Tensor scales = at::empty({N, G}, Wp.options()), zeros = at::empty({N, G}, Wp.options());
  T* s = scales.data_ptr<T>();
  T* z = zeros.data_ptr<T>();
  for (std::int64_t k = 0; k < N * G; ++k) s[k] = params[k].scale, z[k] = params[k].zero;
  at::Tensor group_of_column = at::empty({K}, at::kInt);
  for (std::int64_t j = 0; j < K; ++j) group_of_column.data_ptr<std::int32_t>()[perm[j]] = static_cast<std::int32_t>(group_at[j]);
  if (descending) {  // position j holds original column perm[j]
    const at::Tensor inverse = at::argsort(index);
    codes_p = codes_p.index_select(1, inverse);
    q_p = q_p.index_select(1, inverse);
  }
  r.codes = codes_p.contiguous();
  r.dequantized = q_p.contiguous();
  r.scales = scales;
  r.zeros = zeros;
  r.group_of_column = group_of_column;
  r.loss = loss / 2;
  return r;
}

}  // namespace

GptqResult gptq_solve(const at::Tensor& weight, const at::Tensor& hessian, const GptqOptions& o, const std::string& name) {
  QEVAL_CHECK(weight.dim() == 2 && weight.device().is_cpu() &&
                  (weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kDouble),
              "GPTQ {}: expected a 2-D float32 or float64 CPU weight, found {} of {} dims on {}", name,
              c10::toString(weight.scalar_type()), weight.dim(), weight.device().str());
  const std::int64_t K = weight.size(1);
  QEVAL_CHECK(hessian.dim() == 2 && hessian.size(0) == K && hessian.size(1) == K &&
                  hessian.scalar_type() == weight.scalar_type() && hessian.device().is_cpu(),
              "GPTQ {}: expected a [{}, {}] {} CPU Hessian, found [{}] {}", name, K, K,
              c10::toString(weight.scalar_type()), fmt::join(hessian.sizes(), ", "), c10::toString(hessian.scalar_type()));
  QEVAL_CHECK(o.bits == 2 || o.bits == 3 || o.bits == 4 || o.bits == 8, "GPTQ {}: bits must be 2, 3, 4 or 8, found {}",
              name, o.bits);
  QEVAL_CHECK(o.group_size >= 0, "GPTQ {}: group_size must be 0 (per channel) or positive, found {}", name, o.group_size);
  QEVAL_CHECK(o.block_size > 0, "GPTQ {}: block_size must be positive, found {}", name, o.block_size);
  QEVAL_CHECK(o.dampening >= 0 && std::isfinite(o.dampening), "GPTQ {}: dampening must be a finite fraction >= 0, found {}",
              name, o.dampening);
  QEVAL_CHECK(at::isfinite(weight).all().item<bool>() && at::isfinite(hessian).all().item<bool>(),
              "GPTQ {}: the weight or the Hessian holds a NaN or an infinity", name);
  return weight.scalar_type() == at::kDouble ? solve<double>(weight, hessian, o) : solve<float>(weight, hessian, o);
}

}  // namespace qeval
