#include "stats/attention_stats.h"

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "stats/hidden_stats.h"

namespace qeval {
namespace {

constexpr std::int64_t kQueryBlock = 64;

// One sequence's layer statistics from its totals over heads and queries (both paths reduce to
// these): key-1 share and first-attn credit over queries 2..reach, entropy over every query.
AttentionLayerStats layer_stats_from_totals(double share_sum, double credit_sum, double entropy_sum, std::int64_t sinks,
                                            std::int64_t H, std::int64_t L, std::int64_t reach) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  AttentionLayerStats s;
  const double queries_after_first = static_cast<double>(H * (reach - 1));
  s.first_attn = reach > 1 ? credit_sum / queries_after_first : nan;
  s.first_share = reach > 1 ? share_sum / queries_after_first : nan;
  s.sink_fraction = static_cast<double>(sinks) / static_cast<double>(H);
  s.entropy = entropy_sum / static_cast<double>(H * L);
  return s;
}

}  // namespace

std::vector<AttentionLayerStats> attention_layer_stats(const at::Tensor& probs, std::int64_t sink_T, double sink_eps,
                                                       std::int64_t chunk_elements, std::int64_t window) {
  QEVAL_CHECK(probs.dim() == 4 && probs.size(2) == probs.size(3),
              "attention_layer_stats: probabilities must be [B, H, L, L], got {} dims", probs.dim());
  QEVAL_CHECK(at::isFloatingType(probs.scalar_type()),
              "attention_layer_stats: probabilities must be floating point, got {}",
              std::string(c10::toString(probs.scalar_type())));
  QEVAL_CHECK(sink_T >= 1, "attention_layer_stats: sink T must be at least 1, got {}", sink_T);
  if (chunk_elements <= 0) chunk_elements = default_statistics_chunk(probs.device());
  QEVAL_CHECK(window >= 0, "attention_layer_stats: window must be 0 (global) or positive, got {}", window);
  const std::int64_t B = probs.size(0), H = probs.size(1), L = probs.size(2);
  QEVAL_CHECK(H > 0 && L > 0, "attention_layer_stats: empty attention [{}, {}, {}, {}]", B, H, L, L);

  // Queries go through in blocks of kQueryBlock, and a block reads only the keys up to its last
  // query: the zeros above the diagonal (half the tensor) are never touched. Blocks of (b, h)
  // pairs bound the temporaries. Every reduction runs along the keys over a width fixed by the
  // query block alone, so a row's result depends neither on the batch nor on chunk_elements.
  const std::int64_t BH = B * H;
  at::Tensor all = probs.detach().reshape({BH, L, L});
  // Half precision (GPU) is widened block by block; float and double are used as they are.
  const bool widen = all.scalar_type() != at::kFloat && all.scalar_type() != at::kDouble;
  const double tiny = all.scalar_type() == at::kDouble ? std::numeric_limits<double>::min()
                                                       : static_cast<double>(std::numeric_limits<float>::min());
  at::Tensor values = at::zeros({3, BH, L}, all.options().dtype(at::kDouble));  // A[i, 1], first-attn credit, entropy
  for (std::int64_t q0 = 0; q0 < L; q0 += kQueryBlock) {
    const std::int64_t nq = std::min(kQueryBlock, L - q0), keys = q0 + nq;
    const std::int64_t bh_chunk = std::max<std::int64_t>(1, chunk_elements / (nq * keys));
    for (std::int64_t bh0 = 0; bh0 < BH; bh0 += bh_chunk) {
      const std::int64_t nbh = std::min(bh_chunk, BH - bh0);
      at::Tensor p = all.narrow(0, bh0, nbh).narrow(1, q0, nq).narrow(2, 0, keys);  // [nbh, nq, keys]
      if (widen) p = p.to(at::kFloat);
      at::Tensor key1 = p.select(-1, 0);                              // [nbh, nq]
      at::Tensor row_max = p.amax(-1);                                // [nbh, nq]
      at::Tensor out = values.narrow(1, bh0, nbh).narrow(2, q0, nq);  // [3, nbh, nq] view
      out[0].copy_(key1);

      // Ties matter only on the rows where key 1 holds the maximum, so only those are compared
      // (few rows without a sink; a full pass would cost as much as the log below).
      at::Tensor picked = (key1 >= row_max).nonzero();  // [R, 2]: (pair, query in block)
      if (picked.size(0) > 0) {
        at::Tensor pair = picked.select(1, 0), query = picked.select(1, 1);
        at::Tensor top = row_max.index({pair, query});                              // [R]
        at::Tensor n_tied = (p.index({pair, query}) == top.unsqueeze(-1)).sum(-1);  // [R]
        // Weights are ≥ 0 and masked keys exactly 0, so masked keys tie only when the whole
        // causal row is 0; then exactly the i causal keys of query i (1-based) tie.
        n_tied = at::where(top > 0, n_tied, query + (q0 + 1));
        out[1].index_put_({pair, query}, 1.0 / n_tied.to(at::kDouble));
      }

      // Entropy with 0·log 0 = 0: clamping at the smallest normal number keeps the zeros' terms
      // at 0 and moves a subnormal weight's term by less than 1e-36. Sums over keys in the
      // weights' dtype (pairwise), ample for rows of a few thousand terms.
      at::Tensor plogp = p.clamp_min(tiny);
      plogp.log_();
      plogp.mul_(p);
      out[2].copy_(-plogp.sum(-1));
    }
  }
  values = values.reshape({3, B, H, L}).cpu().contiguous();
  auto v = values.accessor<double, 4>();
  // Queries 1..reach (1-based) see key 1: all of them in a global layer, the first w in a window of w.
  const std::int64_t reach = window > 0 ? std::min(L, window) : L;
  const std::int64_t T = std::min(sink_T, reach);

  // Heads and queries are reduced here in one fixed order: batch-independent results.
  std::vector<AttentionLayerStats> out(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    double credit_sum = 0, share_sum = 0, entropy_sum = 0;
    std::int64_t sinks = 0;
    for (std::int64_t h = 0; h < H; ++h) {
      double alpha = 0;
      for (std::int64_t i = 0; i < T; ++i) alpha += v[0][b][h][i];
      if (alpha / static_cast<double>(T) > sink_eps) ++sinks;
      for (std::int64_t i = 1; i < reach; ++i) {
        share_sum += v[0][b][h][i];
        credit_sum += v[1][b][h][i];
      }
      for (std::int64_t i = 0; i < L; ++i) entropy_sum += v[2][b][h][i];
    }
    out[static_cast<std::size_t>(b)] = layer_stats_from_totals(share_sum, credit_sum, entropy_sum, sinks, H, L, reach);
  }
  return out;
}

std::vector<AttentionLayerStats> attention_layer_stats_from_sums(const at::Tensor& sums_in, std::int64_t length,
                                                                 std::int64_t window, std::int64_t sink_T,
                                                                 double sink_eps) {
  QEVAL_CHECK(sums_in.dim() == 3 && sums_in.size(2) == 4 && sums_in.scalar_type() == at::kDouble,
              "attention_layer_stats_from_sums: sums must be [B, H, 4] float64, got {} dims", sums_in.dim());
  QEVAL_CHECK(length >= 1 && window >= 0 && sink_T >= 1,
              "attention_layer_stats_from_sums: needs L ≥ 1, window ≥ 0 and sink T ≥ 1, got {}, {}, {}", length, window,
              sink_T);
  const at::Tensor sums = sums_in.cpu().contiguous();
  auto v = sums.accessor<double, 3>();
  const std::int64_t B = sums.size(0), H = sums.size(1), L = length;
  QEVAL_CHECK(H > 0, "attention_layer_stats_from_sums: no heads");
  const std::int64_t reach = window > 0 ? std::min(L, window) : L;
  const std::int64_t T = std::min(sink_T, reach);
  std::vector<AttentionLayerStats> out(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    double share_sum = 0, credit_sum = 0, entropy_sum = 0;
    std::int64_t sinks = 0;
    for (std::int64_t h = 0; h < H; ++h) {
      if (v[b][h][0] / static_cast<double>(T) > sink_eps) ++sinks;
      share_sum += v[b][h][1];
      credit_sum += v[b][h][2];
      entropy_sum += v[b][h][3];
    }
    out[static_cast<std::size_t>(b)] = layer_stats_from_totals(share_sum, credit_sum, entropy_sum, sinks, H, L, reach);
  }
  return out;
}

}  // namespace qeval
