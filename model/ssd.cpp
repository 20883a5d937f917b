// Mamba-2's state-space dual layer (model/ssm_scan.h): the sequential reference, the chunked SSD in
// LibTorch ops (Dao & Gu 2024, "Transformers are SSMs", §6 and its ssd_minimal listing; HF's
// Mamba2Mixer.torch_forward computes the same), and the implicit attention matrix of the duality.
#include <limits>
#include <vector>

#include "common/error.h"
#include "model/ssm_scan.h"

namespace qeval {
namespace {

void check_ssd_shapes(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                      const at::Tensor& Cm, const at::Tensor& D) {
  QEVAL_CHECK(x.dim() == 4, "ssd: x must be [B, L, H, P], got {} dims", x.dim());
  const std::int64_t B = x.size(0), L = x.size(1), H = x.size(2);
  QEVAL_CHECK(dt.dim() == 3 && dt.size(0) == B && dt.size(1) == L && dt.size(2) == H, "ssd: dt must be [B, L, H = {}]", H);
  QEVAL_CHECK(A.dim() == 1 && A.size(0) == H && D.dim() == 1 && D.size(0) == H, "ssd: A and D must be [H = {}]", H);
  QEVAL_CHECK(Bm.dim() == 4 && Bm.sizes() == Cm.sizes() && Bm.size(0) == B && Bm.size(1) == L && H % Bm.size(2) == 0,
              "ssd: B and C must be [B, L, G, N] alike with H = {} a multiple of G", H);
}

// [B, L, G, N] → [B, L, H, N]: head h reads group h / (H / G) (mamba_ssm's "(g h)" and HF's repeat_interleave).
at::Tensor per_head(const at::Tensor& t, std::int64_t H) { return t.repeat_interleave(H / t.size(2), 2); }

// Stable segment sums of x [..., T] along its last axis: out[..., i, j] = Σ_{k=j+1..i} x[k] for
// j ≤ i, −inf above the diagonal (a cumsum of the masked copies, not a difference of cumsums, so
// no large terms cancel).
at::Tensor segment_sum(const at::Tensor& x) {
  const std::int64_t T = x.size(-1);
  std::vector<std::int64_t> sizes = x.sizes().vec();
  sizes.push_back(T);
  at::Tensor expanded = x.unsqueeze(-1).expand(sizes).contiguous();  // [..., T(i), T(j)] = x[i]
  const auto opts = x.options().dtype(at::kBool);
  at::Tensor strictly_lower = at::ones({T, T}, opts).tril(-1);
  expanded = expanded.masked_fill(strictly_lower.logical_not(), 0);
  at::Tensor sums = expanded.cumsum(-2);
  return sums.masked_fill(at::ones({T, T}, opts).tril(0).logical_not(), -std::numeric_limits<double>::infinity());
}

}  // namespace

at::Tensor ssd_reference(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                         const at::Tensor& Cm, const at::Tensor& D) {
  check_ssd_shapes(x, dt, A, Bm, Cm, D);
  const std::int64_t B = x.size(0), L = x.size(1), H = x.size(2), P = x.size(3), N = Bm.size(3);
  const at::Tensor Bh = per_head(Bm, H), Ch = per_head(Cm, H);
  at::Tensor h = at::zeros({B, H, P, N}, x.options());
  std::vector<at::Tensor> ys;
  for (std::int64_t t = 0; t < L; ++t) {
    at::Tensor d = dt.select(1, t);                                          // [B, H]
    at::Tensor decay = at::exp(d * A).unsqueeze(-1).unsqueeze(-1);            // [B, H, 1, 1]
    at::Tensor xt = x.select(1, t) * d.unsqueeze(-1);                          // [B, H, P]
    h = decay * h + xt.unsqueeze(-1) * Bh.select(1, t).unsqueeze(2);           // [B, H, P, N]
    ys.push_back((h * Ch.select(1, t).unsqueeze(2)).sum(-1));                  // [B, H, P]
  }
  return at::stack(ys, 1) + x * D.view({1, 1, H, 1});
}

at::Tensor ssd_chunked(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                       const at::Tensor& Cm, const at::Tensor& D, std::int64_t chunk) {
  check_ssd_shapes(x, dt, A, Bm, Cm, D);
  QEVAL_CHECK(chunk >= 1, "ssd_chunked: chunk must be positive, got {}", chunk);
  const std::int64_t B = x.size(0), L = x.size(1), H = x.size(2), P = x.size(3);
  const std::int64_t T = std::min(chunk, L), c = (L + T - 1) / T, pad = c * T - L;
  // Padding with zeros: Δ = 0 there, so padded positions neither decay nor feed the state.
  auto chunks = [&](const at::Tensor& t) {  // [B, L, ...] → [B, c, T, ...]
    std::vector<std::int64_t> pad_spec(2 * static_cast<std::size_t>(t.dim() - 2), 0);
    pad_spec.push_back(0);
    pad_spec.push_back(pad);
    at::Tensor padded = pad > 0 ? at::constant_pad_nd(t, pad_spec) : t;
    std::vector<std::int64_t> shape{B, c, T};
    for (std::int64_t d = 2; d < t.dim(); ++d) shape.push_back(t.size(d));
    return padded.reshape(shape);
  };
  const at::Tensor X = chunks(x * dt.unsqueeze(-1));                 // [B, c, T, H, P]
  const at::Tensor Adt = chunks(dt * A).permute({0, 3, 1, 2});       // [B, H, c, T]
  const at::Tensor Bc = chunks(per_head(Bm, H)), Cc = chunks(per_head(Cm, H));  // [B, c, T, H, N]
  const at::Tensor A_cumsum = Adt.cumsum(-1);                         // [B, H, c, T]

  // 1. Within each chunk: masked attention with the decays as the mask.
  const at::Tensor Lmask = at::exp(segment_sum(Adt));                 // [B, H, c, T(l), T(s)]
  const at::Tensor scores = at::einsum("bclhn,bcshn->bhcls", {Cc, Bc}) * Lmask;
  const at::Tensor Y_diag = at::einsum("bhcls,bcshp->bclhp", {scores, X});
  // 2. Each chunk's final state from its own inputs.
  const at::Tensor decay_states = at::exp(A_cumsum.narrow(-1, T - 1, 1) - A_cumsum);  // [B, H, c, T]
  at::Tensor states = at::einsum("bclhn,bhcl,bclhp->bchpn", {Bc, decay_states, X});    // [B, c, H, P, N]
  // 3. States across chunks: the state entering chunk z from every earlier chunk's own state.
  states = at::cat({at::zeros_like(states.narrow(1, 0, 1)), states}, 1);                // [B, c + 1, H, P, N]
  const at::Tensor chunk_decay =
      at::exp(segment_sum(at::constant_pad_nd(A_cumsum.select(-1, T - 1), {1, 0})));   // [B, H, c + 1, c + 1]
  states = at::einsum("bhzc,bchpn->bzhpn", {chunk_decay, states}).narrow(1, 0, c);      // [B, c, H, P, N]
  // 4. Each position's share of the state entering its chunk.
  const at::Tensor Y_off = at::einsum("bclhn,bchpn,bhcl->bclhp", {Cc, states, at::exp(A_cumsum)});
  at::Tensor y = (Y_diag + Y_off).reshape({B, c * T, H, P}).narrow(1, 0, L);
  return y + x * D.view({1, 1, H, 1});
}

at::Tensor ssd_implicit_attention(const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm, const at::Tensor& Cm,
                                  std::int64_t heads) {
  QEVAL_CHECK(dt.dim() == 3 && dt.size(2) == heads && Bm.dim() == 4 && Bm.sizes() == Cm.sizes(),
              "ssd_implicit_attention: dt must be [B, L, H = {}] and B, C [B, L, G, N]", heads);
  const std::int64_t Bn = dt.size(0), L = dt.size(1), G = Bm.size(2);
  at::Tensor W = at::empty({Bn, heads, L, L}, dt.options().dtype(at::kFloat));
  const at::Tensor d = dt.to(at::kFloat);
  // Decays from cumulative sums in float64 (exp(cum_i − cum_j), j ≤ i): one head at a time, so the
  // temporaries are [B, L, L] whatever the head count.
  const at::Tensor cum = (dt.to(at::kDouble) * A.to(at::kDouble)).cumsum(1);  // [B, L, H]
  const at::Tensor above = at::ones({L, L}, dt.options().dtype(at::kBool)).triu(1);
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t g = h / (heads / G);
    const at::Tensor scores =
        at::matmul(Cm.select(2, g).to(at::kFloat), Bm.select(2, g).to(at::kFloat).transpose(1, 2));  // [B, L, L]
    const at::Tensor c = cum.select(2, h);
    const at::Tensor decay = (c.unsqueeze(2) - c.unsqueeze(1)).exp_().masked_fill_(above, 0).to(at::kFloat);
    at::Tensor m = (scores * decay).mul_(d.select(2, h).unsqueeze(1)).abs_();  // × Δ_j of the key
    const at::Tensor total = m.sum(-1, /*keepdim=*/true);
    W.select(1, h).copy_(at::where(total > 0, m / total, at::zeros_like(m)));
  }
  return W;
}

}  // namespace qeval
