// Mamba's causal depthwise convolution and selective scan (model/ssm_scan.h): the sequential
// reference, the chunked log-depth scan in LibTorch ops (any device) and the CPU loop.
//
// Why three: HF's slow path (the reference's shape) materialises exp(ΔA) for every position at
// once, [B, E, L, N] (671 MB per tensor for E = 5120, L = 2048), and then steps through L one
// LibTorch call at a time. Chunks bound the memory to [B, T, E, N]; on the CPU a plain loop does
// the recurrence (two multiply-adds per state element) after LibTorch's vectorised exp has
// discretised the chunk, and on a GPU the chunk's recurrence is a log-depth scan of LibTorch ops.
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "model/selective_scan_trainable.h"
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

// The chunked CPU scan without the D skip: per chunk, exp(ΔA) and ΔuB by LibTorch's vectorised ops,
// then the recurrence; returns y [B, L, E]. When `entries` is given it receives the state entering
// each chunk (the trainable scan's checkpoints for its backward).
at::Tensor scan_chunks_cpu(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& Bm,
                           const at::Tensor& Cm, std::int64_t chunk, std::vector<at::Tensor>* entries) {
  const std::int64_t Bn = u.size(0), L = u.size(1), E = u.size(2), N = A.size(1);
  at::Tensor h = at::zeros({Bn, E, N}, u.options());
  at::Tensor y = at::empty({Bn, L, E}, u.options());
  for (std::int64_t t0 = 0; t0 < L; t0 += chunk) {
    const std::int64_t T = std::min(chunk, L - t0);
    if (entries) entries->push_back(h.clone());
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
  return y;
}

}  // namespace

at::Tensor selective_scan_cpu(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& Bm,
                              const at::Tensor& Cm, const at::Tensor& D, std::int64_t chunk) {
  check_scan_shapes(u, delta, A, Bm, Cm, D);
  QEVAL_CHECK(u.is_cpu() && (u.scalar_type() == at::kFloat || u.scalar_type() == at::kDouble),
              "selective_scan_cpu: needs float32 or float64 tensors on the CPU");
  if (chunk <= 0) chunk = default_chunk(u, A.size(1));
  return scan_chunks_cpu(u, delta, A, Bm, Cm, chunk, nullptr) + u * D;
}

namespace {

// The backward of one chunk [t0, t0 + T) for the sequences [s_begin, s_end), each (sequence, channel)
// in turn: its states over the chunk are recomputed from the chunk's entry state into a T × N buffer,
// then the positions are walked backwards with g = ∂L/∂h_t (carried in from the next chunk as
// a_{t+1} ∘ g_{t+1}):
//   g_t = gy_t C_t + a_{t+1} ∘ g_{t+1}
//   ∂Δ_t = Σ_n g_t h_{t−1} a_t A + u_t Σ_n g_t B_t       ∂u_t = Δ_t Σ_n g_t B_t + D gy_t
//   ∂A  += g_t h_{t−1} a_t Δ_t                           ∂B_t += g_t Δ_t u_t,  ∂C_t += gy_t h_t  (Σ over channels)
// One work item is a whole sequence, so the sums over channels into ∂B and ∂C need no atomics.
template <typename scalar_t>
void scan_backward_chunk_cpu(std::int64_t t0, std::int64_t T, const at::Tensor& a /*[B, T, E, N]*/,
                             const at::Tensor& u /*[B, L, E]*/, const at::Tensor& delta /*[B, L, E]*/,
                             const at::Tensor& A /*[E, N]*/, const at::Tensor& Bm /*[B, L, N]*/,
                             const at::Tensor& Cm /*[B, L, N]*/, const at::Tensor& D /*[E]*/,
                             const at::Tensor& gy /*[B, L, E]*/, const at::Tensor& h0 /*[B, E, N]*/,
                             at::Tensor& carry /*[B, E, N]*/, at::Tensor& gu /*[B, L, E]*/,
                             at::Tensor& gdelta /*[B, L, E]*/, at::Tensor& gA /*[B, E, N]*/,
                             at::Tensor& gB /*[B, L, N]*/, at::Tensor& gC /*[B, L, N]*/) {
  const std::int64_t Bn = a.size(0), E = a.size(2), N = a.size(3), L = u.size(1);
  const scalar_t *pa = a.data_ptr<scalar_t>(), *pu = u.data_ptr<scalar_t>(), *pd = delta.data_ptr<scalar_t>();
  const scalar_t *pA = A.data_ptr<scalar_t>(), *pB = Bm.data_ptr<scalar_t>(), *pC = Cm.data_ptr<scalar_t>();
  const scalar_t *pD = D.data_ptr<scalar_t>(), *pgy = gy.data_ptr<scalar_t>(), *ph0 = h0.data_ptr<scalar_t>();
  scalar_t *pcarry = carry.data_ptr<scalar_t>(), *pgu = gu.data_ptr<scalar_t>(), *pgd = gdelta.data_ptr<scalar_t>();
  scalar_t *pgA = gA.data_ptr<scalar_t>(), *pgB = gB.data_ptr<scalar_t>(), *pgC = gC.data_ptr<scalar_t>();
  at::parallel_for(0, Bn, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<scalar_t> states(static_cast<std::size_t>((T + 1) * N));  // h_{t0−1} … h_{t0+T−1}
    for (std::int64_t s = begin; s < end; ++s) {
      for (std::int64_t e = 0; e < E; ++e) {
        scalar_t* h = states.data();
        const scalar_t* entry = ph0 + (s * E + e) * N;
        for (std::int64_t n = 0; n < N; ++n) h[n] = entry[n];
        for (std::int64_t t = 0; t < T; ++t) {
          const std::int64_t pos = (s * L + t0 + t) * E + e;
          const scalar_t du = pd[pos] * pu[pos];
          const scalar_t* at_ = pa + ((s * T + t) * E + e) * N;
          const scalar_t* bt = pB + (s * L + t0 + t) * N;
          scalar_t* prev = h + t * N;
          scalar_t* next = prev + N;
          for (std::int64_t n = 0; n < N; ++n) next[n] = at_[n] * prev[n] + du * bt[n];
        }
        scalar_t* g = pcarry + (s * E + e) * N;
        scalar_t* gA_e = pgA + (s * E + e) * N;
        const scalar_t* A_e = pA + e * N;
        for (std::int64_t t = T - 1; t >= 0; --t) {
          const std::int64_t pos = (s * L + t0 + t) * E + e;
          const scalar_t dy = pgy[pos], dt = pd[pos], ut = pu[pos], du = dt * ut;
          const scalar_t* at_ = pa + ((s * T + t) * E + e) * N;
          const scalar_t* bt = pB + (s * L + t0 + t) * N;
          const scalar_t* ct = pC + (s * L + t0 + t) * N;
          scalar_t* gbt = pgB + (s * L + t0 + t) * N;
          scalar_t* gct = pgC + (s * L + t0 + t) * N;
          const scalar_t* ht = h + (t + 1) * N;
          const scalar_t* hp = h + t * N;
          scalar_t sum_gB = 0, sum_A = 0;
          for (std::int64_t n = 0; n < N; ++n) {
            const scalar_t gn = g[n] + dy * ct[n];
            gct[n] += dy * ht[n];
            gbt[n] += gn * du;
            sum_gB += gn * bt[n];
            const scalar_t p = gn * hp[n] * at_[n];  // ∂L/∂(Δ_t A)
            sum_A += p * A_e[n];
            gA_e[n] += p * dt;
            g[n] = gn * at_[n];
          }
          pgd[pos] = sum_A + ut * sum_gB;
          pgu[pos] = dt * sum_gB + dy * pD[e];
        }
      }
    }
  });
}

// The CPU scan as an autograd function: the forward is selective_scan_cpu's (the same operations,
// so training and evaluation compute the same bits), keeping each chunk's entry state; the backward
// recomputes a chunk's states from it, so memory stays at the inputs plus one state per chunk.
struct SelectiveScanCpuFunction : public torch::autograd::Function<SelectiveScanCpuFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& u, const at::Tensor& delta,
                            const at::Tensor& A, const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& D,
                            std::int64_t chunk) {
    std::vector<at::Tensor> entries;
    const at::Tensor y = scan_chunks_cpu(u, delta, A, Bm, Cm, chunk, &entries);
    ctx->save_for_backward({u, delta, A, Bm, Cm, D, at::stack(entries)});
    ctx->saved_data["chunk"] = chunk;
    return y + u * D;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &u = saved[0], &delta = saved[1], &A = saved[2], &Bm = saved[3], &Cm = saved[4], &D = saved[5];
    const at::Tensor& entries = saved[6];  // [chunks, B, E, N]
    const std::int64_t chunk = ctx->saved_data["chunk"].toInt();
    const std::int64_t Bn = u.size(0), L = u.size(1), E = u.size(2), N = A.size(1);
    const at::Tensor gy = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(u);
    at::Tensor carry = at::zeros({Bn, E, N}, u.options());
    at::Tensor gu = at::empty_like(u), gdelta = at::empty_like(u);
    at::Tensor gA = at::zeros({Bn, E, N}, u.options());
    at::Tensor gB = at::zeros_like(Bm), gC = at::zeros_like(Cm);
    for (std::int64_t k = entries.size(0) - 1; k >= 0; --k) {
      const std::int64_t t0 = k * chunk, T = std::min(chunk, L - t0);
      const at::Tensor a = at::exp(delta.narrow(1, t0, T).unsqueeze(-1) * A).contiguous();
      const at::Tensor h0 = entries[k];
      if (u.scalar_type() == at::kFloat)
        scan_backward_chunk_cpu<float>(t0, T, a, u, delta, A, Bm, Cm, D, gy, h0, carry, gu, gdelta, gA, gB, gC);
      else
        scan_backward_chunk_cpu<double>(t0, T, a, u, delta, A, Bm, Cm, D, gy, h0, carry, gu, gdelta, gA, gB, gC);
    }
    return {gu, gdelta, gA.sum(0), gB, gC, (gy * u).sum(at::IntArrayRef{0, 1}), at::Tensor()};
  }
};

}  // namespace

at::Tensor selective_scan_cpu_trainable(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                        const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& D,
                                        std::int64_t chunk) {
  check_scan_shapes(u, delta, A, Bm, Cm, D);
  QEVAL_CHECK(u.is_cpu() && (u.scalar_type() == at::kFloat || u.scalar_type() == at::kDouble),
              "selective_scan_cpu_trainable: needs float32 or float64 tensors on the CPU");
  for (const at::Tensor* t : {&delta, &A, &Bm, &Cm, &D})
    QEVAL_CHECK(t->scalar_type() == u.scalar_type() && t->is_cpu(),
                "selective_scan_cpu_trainable: every operand must be {} on the CPU like u", c10::toString(u.scalar_type()));
  if (chunk <= 0) chunk = default_chunk(u, A.size(1));
  return SelectiveScanCpuFunction::apply(u.contiguous(), delta.contiguous(), A.contiguous(), Bm.contiguous(),
                                         Cm.contiguous(), D.contiguous(), chunk);
}

at::Tensor selective_scan(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& Bm,
                          const at::Tensor& Cm, const at::Tensor& D) {
  // The CPU loop writes through raw pointers, outside autograd: when a gradient is wanted
  // (training), the CPU runs it inside an autograd function with its own backward, other devices
  // the chunked scan, whose LibTorch ops autograd differentiates.
  const bool wants_grad = at::GradMode::is_enabled() && (u.requires_grad() || delta.requires_grad() ||
                                                         A.requires_grad() || Bm.requires_grad() ||
                                                         Cm.requires_grad() || D.requires_grad());
  if (u.is_cpu() && (u.scalar_type() == at::kFloat || u.scalar_type() == at::kDouble)) {
    if (wants_grad) return selective_scan_cpu_trainable(u, delta, A, Bm, Cm, D);
    return selective_scan_cpu(u.contiguous(), delta.contiguous(), A.contiguous(), Bm.contiguous(), Cm.contiguous(),
                              D.contiguous());
  }
  return selective_scan_chunked(u, delta, A, Bm, Cm, D);
}

}  // namespace qeval
