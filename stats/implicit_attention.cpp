#include "stats/implicit_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"

namespace qeval {
namespace {

constexpr std::int64_t kDefaultBlockElements = std::int64_t{1} << 22;
constexpr std::int64_t kImplicitQueryBlock = 64;

// The running reductions over keys of |α| for every (head, query) of a query block, key block by
// key block; a row's W is never formed. Sums go in through add_sums (from a block of |α|, or from
// the factorised products of Mamba-2), maxima through add_maximum.
class RowReductions {
 public:
  RowReductions(std::int64_t heads, std::int64_t queries, const at::TensorOptions& working) {
    const at::TensorOptions d = working.dtype(at::kDouble);
    total_ = at::zeros({heads, queries}, d);
    xlogx_ = at::zeros({heads, queries}, d);
    at_max_ = at::zeros({heads, queries}, d);
    max_ = at::full({heads, queries}, -1.0, working);  // below every |α|: the first block sets it
    first_ = at::zeros({heads, queries}, working);
    tiny_ = working.dtype() == at::kDouble ? std::numeric_limits<double>::min()
                                           : static_cast<double>(std::numeric_limits<float>::min());
  }

  // Σ_j |α| and Σ_j |α| log |α| of a block's keys, [heads, queries] float64.
  void add_sums(const at::Tensor& total, const at::Tensor& xlogx) {
    total_ += total;
    xlogx_ += xlogx;
  }

  // m = |α| of a block of keys, [heads, queries, keys], zero where masked: sums and maximum. The
  // sums run in the block's dtype along the keys (pairwise), ample for rows of a few thousand
  // terms; clamping at the smallest normal number keeps 0 · log 0 at 0.
  void add(const at::Tensor& m, bool holds_key_one) {
    add_sums_of(m);
    add_maximum(m, at::Tensor(), holds_key_one);
  }

  // The sums alone of a block of |α| (when the caller reduces the maxima itself).
  void add_sums_of(const at::Tensor& m) {
    at::Tensor mlogm = m.clamp_min(tiny_);
    mlogm.log_().mul_(m);
    add_sums(m.sum(-1).to(at::kDouble), mlogm.sum(-1).to(at::kDouble));
  }

  // The block's |α| is scale[h, i] · v[h, i, j] (scale > 0; undefined: 1). Keys tie where v is equal.
  // The number of keys at a row's maximum matters only where key 1 is among them, so ties are
  // counted on those rows alone.
  void add_maximum(const at::Tensor& v, const at::Tensor& scale, bool holds_key_one) {
    at::Tensor block_max = v.amax(-1);
    if (holds_key_one) first_ = scale.defined() ? v.select(-1, 0) * scale : v.select(-1, 0).clone();
    const at::Tensor scaled_max = scale.defined() ? block_max * scale : block_max;
    const at::Tensor new_max = at::maximum(max_, scaled_max);
    at_max_.masked_fill_(max_ != new_max, 0.0);
    const at::Tensor rows = ((scaled_max == new_max) & (first_ == new_max)).nonzero();  // [R, 2]
    if (rows.size(0) > 0) {
      const at::Tensor h = rows.select(1, 0), i = rows.select(1, 1);
      const at::Tensor ties = (v.index({h, i}) == block_max.index({h, i}).unsqueeze(-1)).sum(-1).to(at::kDouble);
      at_max_.index_put_({h, i}, ties, /*accumulate=*/true);
    }
    max_ = new_max;
  }

  // When the caller reduces the maxima itself: |α[i, 1]|, the row maximum and the number of keys at it
  // (needed only where key 1 holds the maximum).
  void set_maximum(const at::Tensor& first, const at::Tensor& max, const at::Tensor& at_max) {
    first_ = first;
    max_ = max;
    at_max_ = at_max;
  }

  // values [3, heads, L] float64: W[i, 1], first-attn credit and entropy of queries q0 .. q0 + queries.
  void finish(at::Tensor& values, std::int64_t q0) const {
    const std::int64_t queries = total_.size(1);
    const at::Tensor first = first_.to(at::kDouble), seen = total_ > 0;
    const at::Tensor safe_total = at::where(seen, total_, at::ones_like(total_));
    // A row whose every |α| is 0 is all zeros in W; then its i causal keys (1-based) tie at 0, key 1
    // among them (the masked keys of the diagonal block are zeros too, so they are not counted).
    const at::Tensor position = at::arange(q0 + 1, q0 + 1 + queries, total_.options()).unsqueeze(0);
    const at::Tensor ties = at::where(max_ > 0, at_max_, position.expand_as(at_max_));
    const at::Tensor on_first = first_ == max_;
    values[0].narrow(1, q0, queries).copy_(at::where(seen, first / safe_total, at::zeros_like(first)));
    values[1].narrow(1, q0, queries).copy_(at::where(on_first, 1.0 / ties, at::zeros_like(ties)));
    values[2].narrow(1, q0, queries)
        .copy_(at::where(seen, safe_total.log() - xlogx_ / safe_total, at::zeros_like(total_)));
  }

 private:
  at::Tensor total_, xlogx_, at_max_, max_, first_;
  double tiny_;
};

// The largest exponent the factorised decay of a diagonal block may span in `dtype` before a factor
// could overflow or lose the relative precision of its exponent (e^40 ≈ 2e17 in float32).
double factorised_span_limit(at::ScalarType dtype) { return dtype == at::kDouble ? 300.0 : 40.0; }

// Mamba-2, one sequence: dt [L, H], A [H], Bm, Cm [L, G, N] → values [3, H, L].
//
// For the keys before a query block, |α_h[i, j]| = ĉ_h[i] · |s[i, j]| · b̂_h[j] with s = C Bᵀ of the
// head's group, ĉ_h[i] = exp(cum_i − cum_{i₀}) and b̂_h[j] = exp(cum_{i₀} − cum_j) Δ_j, so a row's sums
// over keys are matrix products of the group's |s| (and |s| log |s|) with the heads' b̂ (and b̂ log b̂),
// log |α| = log |s| + log ĉ + log b̂ with the last two known in closed form: a logarithm per (i, j)
// and group, not per head. Only the maximum is taken per head, over ĉ-free products |s| · b̂.
void mamba2_sequence(const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm, const at::Tensor& Cm,
                     std::int64_t block_elements, at::Tensor& values) {
  const std::int64_t L = dt.size(0), H = dt.size(1), G = Bm.size(1), Hg = H / G;
  const at::ScalarType st = dt.scalar_type();
  const at::TensorOptions working = dt.options();
  // Cumulative log-decays in float64, [H, L]: exp(cum_i − cum_j) = Π_{k=j+1..i} exp(Δ_k A).
  const at::Tensor cum = (dt.to(at::kDouble) * A.to(at::kDouble)).cumsum(0).t().contiguous();
  const at::Tensor dt_t = dt.t().to(at::kDouble);                                 // [H, L]
  const at::Tensor log_dt = dt_t.log();
  const at::Tensor C = Cm.permute({1, 0, 2}).contiguous(), B = Bm.permute({1, 0, 2}).contiguous();  // [G, L, N]
  const double tiny = std::numeric_limits<double>::min();
  const std::int64_t key_block = std::max(kImplicitQueryBlock, block_elements / (H * kImplicitQueryBlock));
  // [H, x] → [G, x, Hg] (heads of a group side by side), and back.
  auto by_group = [&](const at::Tensor& t) { return t.view({G, Hg, t.size(1)}).transpose(1, 2); };
  auto by_head = [&](const at::Tensor& t) { return t.transpose(1, 2).reshape({H, t.size(1)}); };
  for (std::int64_t q0 = 0; q0 < L; q0 += kImplicitQueryBlock) {
    const std::int64_t nq = std::min(kImplicitQueryBlock, L - q0);
    const at::Tensor Cq = C.narrow(1, q0, nq);
    const at::Tensor cum_q = cum.narrow(1, q0, nq);
    const at::Tensor ref = cum.narrow(1, q0, 1);                                  // cum at the block's first query
    const at::Tensor log_c_hat = cum_q - ref;                                     // [H, nq], ≤ 0
    const at::Tensor c_hat = log_c_hat.exp();
    RowReductions rows(H, nq, working);
    std::vector<at::Tensor> s_blocks, b_blocks;  // per block of earlier keys: |s| [G, nq, nk] and b̂ [H, nk]
    for (std::int64_t k0 = 0; k0 < q0; k0 += key_block) {  // keys before the block
      const std::int64_t nk = std::min(key_block, q0 - k0);
      const at::Tensor s = at::bmm(Cq, B.narrow(1, k0, nk).transpose(1, 2)).abs_();  // [G, nq, nk]
      const at::Tensor s64 = s.to(at::kDouble);
      at::Tensor slogs = s64.clamp_min(tiny);
      slogs.log_().mul_(s64);
      const at::Tensor log_b_hat = (ref - cum.narrow(1, k0, nk)) + log_dt.narrow(1, k0, nk);  // [H, nk]
      const at::Tensor b_hat = log_b_hat.exp();
      // Σ_j |s| b̂, Σ_j |s| b̂ log b̂ and Σ_j |s| log|s| b̂ per (head, query).
      const at::Tensor s_b = by_head(at::bmm(s64, by_group(b_hat)));
      // b̂ log b̂ with 0 · log 0 = 0 (a time step that underflowed to 0 has log Δ = −∞).
      const at::Tensor blogb = at::where(b_hat > 0, b_hat * log_b_hat, at::zeros_like(b_hat));
      const at::Tensor s_blogb = by_head(at::bmm(s64, by_group(blogb)));
      const at::Tensor slogs_b = by_head(at::bmm(slogs, by_group(b_hat)));
      rows.add_sums(c_hat * s_b, c_hat * (slogs_b + s_blogb + log_c_hat * s_b));
      s_blocks.push_back(s);
      b_blocks.push_back(b_hat.to(st));
    }
    // The block's own keys j ≤ i: decays computed directly (an [H, nq, nq] exp, small).
    const at::Tensor s = at::bmm(Cq, B.narrow(1, q0, nq).transpose(1, 2)).abs_();  // [G, nq, nq]
    const at::Tensor above = at::ones({nq, nq}, working.dtype(at::kBool)).triu(1);
    const at::Tensor decay = (cum_q.unsqueeze(2) - cum_q.unsqueeze(1))
                                 .masked_fill_(above, -std::numeric_limits<double>::infinity())
                                 .exp_()
                                 .mul_(dt_t.narrow(1, q0, nq).unsqueeze(1))
                                 .to(st);                                         // [H, nq, nq]
    const at::Tensor m_diag = (s.view({G, 1, nq, nq}) * decay.view({G, Hg, nq, nq})).view({H, nq, nq});
    rows.add_sums_of(m_diag);

    // Maxima. |α[i, 1]| (from the products the earlier keys' maxima use, so equal values compare
    // equal), then the maximum over the block's own keys; key 1 can hold the row's maximum only
    // where it is at least that, and only those rows (few, unless key 1 is a sink) are reduced over
    // the earlier keys, |α| = ĉ · |s| · b̂ formed for them alone.
    const at::Tensor scale = c_hat.to(st);
    const at::Tensor first =
        q0 == 0 ? m_diag.select(-1, 0).clone()
                : (s_blocks[0].select(-1, 0).view({G, 1, nq}) * b_blocks[0].select(1, 0).view({G, Hg, 1})).view({H, nq}) *
                      scale;
    at::Tensor max = m_diag.amax(-1);
    at::Tensor at_max = at::zeros({H, nq}, working.dtype(at::kDouble));
    const at::Tensor open = (first >= max).nonzero();  // [R, 2]: (head, query)
    if (open.size(0) > 0) {
      const at::Tensor h = open.select(1, 0), i = open.select(1, 1);
      const at::Tensor s_row = h.div(Hg, "floor").mul_(nq).add_(i);  // row of [G · nq, keys]
      const at::Tensor scale_rows = scale.index({h, i}).unsqueeze(1);
      std::vector<at::Tensor> v_rows;
      at::Tensor row_max = max.index({h, i});
      for (std::size_t k = 0; k < s_blocks.size(); ++k) {
        const at::Tensor& sb = s_blocks[k];
        v_rows.push_back(sb.view({G * nq, sb.size(2)}).index_select(0, s_row) * b_blocks[k].index_select(0, h) *
                         scale_rows);                                            // [R, nk], |α|
        row_max = at::maximum(row_max, v_rows.back().amax(-1));
      }
      at::Tensor ties = (m_diag.index({h, i}) == row_max.unsqueeze(-1)).sum(-1);
      for (const at::Tensor& v : v_rows) ties += (v == row_max.unsqueeze(-1)).sum(-1);
      max.index_put_({h, i}, row_max);
      at_max.index_put_({h, i}, ties.to(at::kDouble));
    }
    rows.set_maximum(first, max, at_max);
    rows.finish(values, q0);
  }
}

// Mamba, one sequence: dt [L, E], A [E, N], Bm, Cm [L, N] → values [3, E, L].
void mamba_sequence(const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm, const at::Tensor& Cm,
                    std::int64_t block_elements, at::Tensor& values) {
  const std::int64_t L = dt.size(0), E = dt.size(1), N = A.size(1);
  const at::ScalarType st = dt.scalar_type();
  const at::TensorOptions working = dt.options();
  // Σ_{k≤i} Δ_k per channel in float64, [E, L]: the decay over (j, i] of state n is exp(A[c, n] (D_i − D_j)).
  const at::Tensor Dsum = dt.to(at::kDouble).cumsum(0).t().contiguous();
  const at::Tensor A64 = A.to(at::kDouble);
  const at::Tensor dt_t = dt.t();                                                   // [E, L]
  const double span_limit = factorised_span_limit(st);
  // Channels a block at a time: α [ch, nq, keys] and the factors [ch, keys, N] stay within block_elements.
  const std::int64_t key_block = std::max<std::int64_t>(kImplicitQueryBlock, 256);
  const std::int64_t channels =
      std::clamp<std::int64_t>(block_elements / (kImplicitQueryBlock * std::max(key_block, N)), 1, E);
  for (std::int64_t c0 = 0; c0 < E; c0 += channels) {
    const std::int64_t nc = std::min(channels, E - c0);
    const at::Tensor Dc = Dsum.narrow(0, c0, nc), Ac = A64.narrow(0, c0, nc).unsqueeze(1);  // [nc, L], [nc, 1, N]
    const at::Tensor dtc = dt_t.narrow(0, c0, nc);
    at::Tensor out = values.narrow(1, c0, nc);
    // B̂ for keys [k0, k0 + nk) against the reference position `ref`: Δ_j B_j exp(A (D_ref − D_j)).
    auto b_hat = [&](std::int64_t k0, std::int64_t nk, std::int64_t ref) {
      const at::Tensor gap = (Dc.narrow(1, ref, 1) - Dc.narrow(1, k0, nk)).unsqueeze(-1);  // [nc, nk, 1]
      return (Ac * gap).exp_().to(st).mul_(dtc.narrow(1, k0, nk).unsqueeze(-1)).mul_(Bm.narrow(0, k0, nk).unsqueeze(0));
    };
    for (std::int64_t q0 = 0; q0 < L; q0 += kImplicitQueryBlock) {
      const std::int64_t nq = std::min(kImplicitQueryBlock, L - q0);
      const at::Tensor gap_q = (Dc.narrow(1, q0, nq) - Dc.narrow(1, q0, 1)).unsqueeze(-1);  // [nc, nq, 1], ≥ 0
      const at::Tensor c_hat = (Ac * gap_q).exp_().to(st).mul_(Cm.narrow(0, q0, nq).unsqueeze(0));  // [nc, nq, N]
      RowReductions rows(nc, nq, working);
      for (std::int64_t k0 = 0; k0 < q0; k0 += key_block) {  // keys before the block: both factors ≤ 1
        const std::int64_t nk = std::min(key_block, q0 - k0);
        rows.add(at::bmm(c_hat, b_hat(k0, nk, q0).transpose(1, 2)).abs_(), k0 == 0);
      }
      // The block's own keys: B̂'s factor exp(A (D_{q0} − D_j)) ≥ 1 spans up to max_n |A| (D_last − D_{q0}).
      at::Tensor alpha = at::bmm(c_hat, b_hat(q0, nq, q0).transpose(1, 2));  // [nc, nq, nq]
      const at::Tensor span = (A64.narrow(0, c0, nc).abs().amax(1) *
                               (Dc.select(1, q0 + nq - 1) - Dc.select(1, q0)));  // [nc]
      const at::Tensor wide = (span > span_limit).nonzero().reshape({-1});
      if (wide.numel() > 0) {  // those channels directly: exp(A (D_i − D_j)) per (i, j, n), masked
        const at::Tensor Dw = Dc.index_select(0, wide).narrow(1, q0, nq);              // [w, nq]
        const at::Tensor gap = (Dw.unsqueeze(2) - Dw.unsqueeze(1)).clamp_min(0);       // [w, nq(i), nq(j)]
        const at::Tensor decay =
            (A64.narrow(0, c0, nc).index_select(0, wide).unsqueeze(1).unsqueeze(1) * gap.unsqueeze(-1)).exp_().to(st);
        const at::Tensor Cq = Cm.narrow(0, q0, nq), Bq = Bm.narrow(0, q0, nq);
        const at::Tensor direct = at::einsum("in,wijn,jn->wij", {Cq, decay, Bq}) *
                                  dtc.index_select(0, wide).narrow(1, q0, nq).unsqueeze(1);
        alpha.index_copy_(0, wide, direct);
      }
      const at::Tensor above = at::ones({nq, nq}, working.dtype(at::kBool)).triu(1);
      rows.add(alpha.masked_fill_(above, 0).abs_(), q0 == 0);
      rows.finish(out, q0);
    }
  }
}

}  // namespace

at::Tensor implicit_attention_sums(const SsmSelection& s, std::int64_t sink_T, std::int64_t block_elements) {
  const bool two = s.kind == SsmSelection::Kind::mamba2;
  QEVAL_CHECK(s.delta.dim() == 3 && s.Bm.sizes() == s.Cm.sizes() && s.Bm.dim() == (two ? 4 : 3) &&
                  s.Bm.size(0) == s.delta.size(0) && s.Bm.size(1) == s.delta.size(1),
              "implicit attention: delta must be [B, L, C] and B, C [B, L, {}N], got {} and {} dims", two ? "G, " : "",
              s.delta.dim(), s.Bm.dim());
  QEVAL_CHECK(two ? (s.A.dim() == 1 && s.A.size(0) == s.delta.size(2) && s.delta.size(2) % s.Bm.size(2) == 0)
                  : (s.A.dim() == 2 && s.A.size(0) == s.delta.size(2) && s.A.size(1) == s.Bm.size(2)),
              "implicit attention: A does not match delta's {} channels", s.delta.size(2));
  QEVAL_CHECK(sink_T >= 1, "implicit attention: sink T must be at least 1, got {}", sink_T);
  if (block_elements <= 0) block_elements = kDefaultBlockElements;
  const std::int64_t Bn = s.delta.size(0), L = s.delta.size(1), heads = s.delta.size(2);
  // Half precision (GPU) is widened; float32 and float64 are used as they are.
  const at::ScalarType st = s.delta.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto as = [&](const at::Tensor& t) { return t.detach().to(st); };
  const at::Tensor delta = as(s.delta), A = as(s.A), Bm = as(s.Bm), Cm = as(s.Cm);
  const std::int64_t T = std::min(sink_T, L);
  at::Tensor sums = at::zeros({Bn, heads, 4}, at::kDouble);
  auto out = sums.accessor<double, 3>();
  for (std::int64_t b = 0; b < Bn; ++b) {
    at::Tensor values = at::zeros({3, heads, L}, delta.options().dtype(at::kDouble));  // W[i, 1], credit, entropy
    if (two)
      mamba2_sequence(delta[b], A, Bm[b], Cm[b], block_elements, values);
    else
      mamba_sequence(delta[b], A, Bm[b], Cm[b], block_elements, values);
    const at::Tensor v_cpu = values.cpu().contiguous();
    auto v = v_cpu.accessor<double, 3>();
    // Queries in order per head: a sequence's sums do not depend on its batch.
    for (std::int64_t h = 0; h < heads; ++h) {
      double sink = 0, share = 0, credit = 0, entropy = 0;
      for (std::int64_t i = 0; i < T; ++i) sink += v[0][h][i];
      for (std::int64_t i = 1; i < L; ++i) {
        share += v[0][h][i];
        credit += v[1][h][i];
      }
      for (std::int64_t i = 0; i < L; ++i) entropy += v[2][h][i];
      out[b][h][0] = sink;
      out[b][h][1] = share;
      out[b][h][2] = credit;
      out[b][h][3] = entropy;
    }
  }
  return sums;
}

std::vector<AttentionLayerStats> implicit_attention_stats(const SsmSelection& s, std::int64_t sink_T, double sink_eps,
                                                          std::int64_t block_elements) {
  return attention_layer_stats_from_sums(implicit_attention_sums(s, sink_T, block_elements), s.delta.size(1),
                                         /*window=*/0, sink_T, sink_eps);
}

std::vector<double> selection_entropy(const at::Tensor& delta) {
  QEVAL_CHECK(delta.dim() == 3, "selection entropy: delta must be [B, L, C], got {} dims", delta.dim());
  const at::Tensor d = delta.detach().to(at::kCPU, at::kDouble);
  const at::Tensor S = d / d.sum(1, /*keepdim=*/true);                // per channel, over positions
  const at::Tensor H = -at::xlogy(S, S).sum(1).contiguous();         // [B, C]
  std::vector<double> out;
  auto h = H.accessor<double, 2>();
  for (std::int64_t b = 0; b < H.size(0); ++b) {
    double sum = 0;  // channels in order: batch-independent
    for (std::int64_t c = 0; c < H.size(1); ++c) sum += h[b][c];
    out.push_back(sum / static_cast<double>(H.size(1)));
  }
  return out;
}

at::Tensor selective_scan_implicit_attention(const at::Tensor& delta, const at::Tensor& A, const at::Tensor& Bm,
                                             const at::Tensor& Cm) {
  const std::int64_t Bn = delta.size(0), L = delta.size(1), E = delta.size(2);
  const at::Tensor d = delta.to(at::kDouble), A64 = A.to(at::kDouble), B = Bm.to(at::kDouble), C = Cm.to(at::kDouble);
  const at::Tensor Dsum = d.cumsum(1);  // [B, L, E]
  const at::Tensor causal = at::ones({L, L}, at::kBool).tril();
  at::Tensor W = at::zeros({Bn, E, L, L}, at::kDouble);
  for (std::int64_t b = 0; b < Bn; ++b)
    for (std::int64_t c = 0; c < E; ++c) {
      const at::Tensor D = Dsum[b].select(1, c);                                       // [L]
      const at::Tensor gap = (D.unsqueeze(1) - D.unsqueeze(0)).clamp_min(0);          // [i, j]
      const at::Tensor decay = (gap.unsqueeze(-1) * A64[c]).exp();                      // [i, j, N]
      at::Tensor alpha = at::einsum("in,ijn,jn->ij", {C[b], decay, B[b]}) * d[b].select(1, c).unsqueeze(0);
      alpha = alpha.masked_fill(causal.logical_not(), 0).abs();
      const at::Tensor total = alpha.sum(-1, /*keepdim=*/true);
      W[b][c].copy_(at::where(total > 0, alpha / total, at::zeros_like(alpha)));
    }
  return W;
}

}  // namespace qeval
