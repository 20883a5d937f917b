// Mamba's causal depthwise convolution and selective scan (model/ssm_scan.h): the sequential
// reference, the chunked log-depth scan in LibTorch ops (any device) and the CPU loop.
//
// Why three: HF's slow path (the reference's shape) materialises exp(ΔA) for every position at
// once, [B, E, L, N] (671 MB per tensor for E = 5120, L = 2048), and then steps through L one
// LibTorch call at a time. Chunks bound the memory to [B, T, E, N]; on the CPU a plain loop does
// the recurrence (two multiply-adds per state element) after LibTorch's vectorised exp has
// discretised the chunk, and on a GPU the chunk's recurrence is a log-depth scan of LibTorch ops.
#include <ATen/Parallel.h>

#include <algorithm>

#include "common/error.h"
#include "model/ssm_scan.h"

namespace qeval {
namespace {

void check_scan_shapes(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& Bm,
                       const at::Tensor& Cm, const at::Tensor& D) {
  QEVAL_CHECK(u.dim() == 3 && delta.sizes() == u.sizes(), "selective_scan: u and delta must be [B, L, E] alike");
  const std::int64_t B = u.size(0), L = u.size(1), E = u.size(2);
  QEVAL_CHECK(A.dim() == 2 && A.size(0) == E, "selective_scan: A must be [E = {}, N], got {} dims", E, A.dim());
  const std::int64_t N = A.size(1);
  for (const at::Tensor* t : {&Bm, &Cm})
    QEVAL_CHECK(t->dim() == 3 && t->size(0) == B && t->size(1) == L && t->size(2) == N,
                "selective_scan: B and C must be [B = {}, L = {}, N = {}]", B, L, N);
  QEVAL_CHECK(D.dim() == 1 && D.size(0) == E, "selective_scan: D must be [E = {}]", E);
}

// Chunk length bounding a chunk's [B, T, E, N] temporaries to about 2^22 elements.
std::int64_t default_chunk(const at::Tensor& u, std::int64_t N) {
  const std::int64_t per_position = std::max<std::int64_t>(1, u.size(0) * u.size(2) * N);
  return std::clamp<std::int64_t>((std::int64_t{1} << 22) / per_position, 8, 256);
}

}  // namespace

at::Tensor causal_depthwise_conv1d(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  QEVAL_CHECK(x.dim() == 3 && w.dim() == 2 && w.size(0) == x.size(2),
              "causal_depthwise_conv1d: x must be [B, L, C] and w [C, K], got x {} dims, w {} dims", x.dim(), w.dim());
  const std::int64_t L = x.size(1), K = w.size(1);
  at::Tensor padded = at::constant_pad_nd(x, {0, 0, K - 1, 0});  // [B, L + K − 1, C]
  at::Tensor y = padded.narrow(1, 0, L) * w.select(1, 0);
  for (std::int64_t k = 1; k < K; ++k) y.addcmul_(padded.narrow(1, k, L), w.select(1, k));
  if (bias.defined()) y.add_(bias);
  return y;
}

at::Tensor selective_scan_reference(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                    const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& D) {
  check_scan_shapes(u, delta, A, Bm, Cm, D);
  const std::int64_t L = u.size(1);
  at::Tensor h = at::zeros({u.size(0), u.size(2), A.size(1)}, u.options());  // [B, E, N]
  std::vector<at::Tensor> ys;
  for (std::int64_t t = 0; t < L; ++t) {
    at::Tensor d = delta.select(1, t).unsqueeze(-1);  // [B, E, 1]
    h = at::exp(d * A) * h + (d * u.select(1, t).unsqueeze(-1)) * Bm.select(1, t).unsqueeze(1);
    ys.push_back((h * Cm.select(1, t).unsqueeze(1)).sum(-1));  // [B, E]
  }
  return at::stack(ys, 1) + u * D;
}

at::Tensor selective_scan_chunked(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                  const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& D,
                                  std::int64_t chunk) {
  check_scan_shapes(u, delta, A, Bm, Cm, D);
  const std::int64_t Bn = u.size(0), L = u.size(1), E = u.size(2), N = A.size(1);
  if (chunk <= 0) chunk = default_chunk(u, N);
  at::Tensor h = at::zeros({Bn, E, N}, u.options());
  std::vector<at::Tensor> ys;
  for (std::int64_t t0 = 0; t0 < L; t0 += chunk) {
    const std::int64_t T = std::min(chunk, L - t0);
    at::Tensor d = delta.narrow(1, t0, T).unsqueeze(-1);                                // [B, T, E, 1]
    at::Tensor a = at::exp(d * A);                                                       // [B, T, E, N]
    at::Tensor b = (d * u.narrow(1, t0, T).unsqueeze(-1)) * Bm.narrow(1, t0, T).unsqueeze(2);  // [B, T, E, N]
    // Inclusive scan over T: after it, (a_t, b_t) maps the chunk's initial state to h_t.
    for (std::int64_t step = 1; step < T; step *= 2) {
      at::Tensor a_prev = a.narrow(1, 0, T - step), b_prev = b.narrow(1, 0, T - step);
      at::Tensor a_cur = a.narrow(1, step, T - step), b_cur = b.narrow(1, step, T - step);
      at::Tensor nb = at::addcmul(b_cur, a_cur, b_prev);
      at::Tensor na = a_cur * a_prev;
      b = at::cat({b.narrow(1, 0, step), nb}, 1);
      a = at::cat({a.narrow(1, 0, step), na}, 1);
    }
    at::Tensor states = at::addcmul(b, a, h.unsqueeze(1));  // [B, T, E, N]
    ys.push_back((states * Cm.narrow(1, t0, T).unsqueeze(2)).sum(-1));  // [B, T, E]
    h = states.select(1, T - 1);
  }
  return at::cat(ys, 1) + u * D;
}

namespace {

template <typename scalar_t>
void scan_chunk_cpu(const at::Tensor& a /*[B, T, E, N]*/, const at::Tensor& b /*[B, T, E, N]*/,
                    const at::Tensor& C /*[B, T, N]*/, at::Tensor& h /*[B, E, N]*/, at::Tensor& y /*[B, T, E]*/) {
  const std::int64_t Bn = a.size(0), T = a.size(1), E = a.size(2), N = a.size(3);
  const scalar_t* pa = a.data_ptr<scalar_t>();
  const scalar_t* pb = b.data_ptr<scalar_t>();
  const scalar_t* pc = C.data_ptr<scalar_t>();
  scalar_t* ph = h.data_ptr<scalar_t>();
  scalar_t* py = y.data_ptr<scalar_t>();
  // One (sequence, channel) per work item: its N states step through the chunk's T positions.
  at::parallel_for(0, Bn * E, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t item = begin; item < end; ++item) {
      const std::int64_t s = item / E, e = item % E;
      scalar_t* state = ph + (s * E + e) * N;
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t off = ((s * T + t) * E + e) * N;
        const scalar_t* at_ = pa + off;
        const scalar_t* bt = pb + off;
        const scalar_t* ct = pc + (s * T + t) * N;
        scalar_t acc = 0;
        for (std::int64_t n = 0; n < N; ++n) {
          state[n] = at_[n] * state[n] + bt[n];
          acc += state[n] * ct[n];
        }
        py[(s * T + t) * E + e] = acc;
      }
    }
  });
}

}  // namespace

at::Tensor selective_scan_cpu(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& Bm,
                              const at::Tensor& Cm, const at::Tensor& D, std::int64_t chunk) {
  check_scan_shapes(u, delta, A, Bm, Cm, D);
  QEVAL_CHECK(u.is_cpu() && (u.scalar_type() == at::kFloat || u.scalar_type() == at::kDouble),
              "selective_scan_cpu: needs float32 or float64 tensors on the CPU");
  const std::int64_t Bn = u.size(0), L = u.size(1), E = u.size(2), N = A.size(1);
  if (chunk <= 0) chunk = default_chunk(u, N);
  at::Tensor h = at::zeros({Bn, E, N}, u.options());
  at::Tensor y = at::empty({Bn, L, E}, u.options());
  for (std::int64_t t0 = 0; t0 < L; t0 += chunk) {
    const std::int64_t T = std::min(chunk, L - t0);
    at::Tensor d = delta.narrow(1, t0, T).unsqueeze(-1);
    at::Tensor a = at::exp(d * A).contiguous();
    at::Tensor b = ((d * u.narrow(1, t0, T).unsqueeze(-1)) * Bm.narrow(1, t0, T).unsqueeze(2)).contiguous();
    at::Tensor c = Cm.narrow(1, t0, T).contiguous();
    at::Tensor yc = at::empty({Bn, T, E}, u.options());
    if (u.scalar_type() == at::kFloat)
      scan_chunk_cpu<float>(a, b, c, h, yc);
    else
      scan_chunk_cpu<double>(a, b, c, h, yc);
    y.narrow(1, t0, T).copy_(yc);
  }
  return y + u * D;
}

at::Tensor selective_scan(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& Bm,
                          const at::Tensor& Cm, const at::Tensor& D) {
  if (u.is_cpu() && (u.scalar_type() == at::kFloat || u.scalar_type() == at::kDouble))
    return selective_scan_cpu(u.contiguous(), delta.contiguous(), A.contiguous(), Bm.contiguous(), Cm.contiguous(),
                              D.contiguous());
  return selective_scan_chunked(u, delta, A, Bm, Cm, D);
}

}  // namespace qeval
