#include "eval/attention_stats.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace qeval {

std::vector<AttentionLayerStats> attention_layer_stats(const at::Tensor& probs, std::int64_t sink_T, double sink_eps) {
  QEVAL_CHECK(probs.dim() == 4 && probs.size(2) == probs.size(3),
              "attention_layer_stats: probabilities must be [B, H, L, L], got {} dims", probs.dim());
  QEVAL_CHECK(at::isFloatingType(probs.scalar_type()), "attention_layer_stats: probabilities must be floating point, got {}",
              std::string(c10::toString(probs.scalar_type())));
  QEVAL_CHECK(sink_T >= 1, "attention_layer_stats: sink T must be at least 1, got {}", sink_T);
  const std::int64_t B = probs.size(0), H = probs.size(1), L = probs.size(2);
  QEVAL_CHECK(H > 0 && L > 0, "attention_layer_stats: empty attention [{}, {}, {}, {}]", B, H, L, L);

  // Half precision (GPU) is widened once; float and double are used as they are.
  at::Tensor p = probs.detach();
  if (p.scalar_type() != at::kFloat && p.scalar_type() != at::kDouble) p = p.to(at::kFloat);
  at::Tensor key1 = p.select(-1, 0);  // [B, H, L]: A[h, i, 1] for every query i
  at::Tensor row_max = p.amax(-1);    // [B, H, L]
  at::Tensor key1_is_max = key1 >= row_max;

  // Ties matter only on the rows where key 1 holds the maximum, so only those are compared
  // (few rows without a sink; a full pass over [B, H, L, L] would cost as much as the log).
  at::Tensor credit = at::zeros_like(key1, key1.options().dtype(at::kDouble));  // [B, H, L]
  at::Tensor rows = key1_is_max.reshape({-1}).nonzero().squeeze(-1);           // flat (b, h, i)
  if (rows.numel() > 0) {
    at::Tensor candidates = p.reshape({-1, L}).index_select(0, rows);          // [R, L]
    at::Tensor top = row_max.reshape({-1}).index_select(0, rows);              // [R]
    at::Tensor n_tied = (candidates == top.unsqueeze(-1)).sum(-1);             // [R]
    // Weights are ≥ 0 and masked keys exactly 0, so masked keys tie only when the whole causal
    // row is 0; then exactly the i causal keys of query i (1-based) tie.
    at::Tensor query = rows.remainder(L) + 1;
    n_tied = at::where(top > 0, n_tied, query);
    credit.reshape({-1}).index_copy_(0, rows, 1.0 / n_tied.to(at::kDouble));
  }

  // Entropy with 0·log 0 = 0: clamping at the smallest normal number leaves the zeros' product
  // at 0 and changes a subnormal weight's term by less than 1e-36. Sums over keys in the
  // weights' dtype (pairwise), which is ample for rows of a few thousand terms.
  const double tiny = p.scalar_type() == at::kDouble ? std::numeric_limits<double>::min()
                                                      : static_cast<double>(std::numeric_limits<float>::min());
  at::Tensor plogp = p.clamp_min(tiny);
  plogp.log_();
  plogp.mul_(p);
  at::Tensor entropy = -plogp.sum(-1).to(at::kDouble);  // [B, H, L]

  at::Tensor values = at::stack({key1.to(at::kDouble), credit, entropy}).cpu().contiguous();  // [3, B, H, L]
  auto v = values.accessor<double, 4>();
  const std::int64_t T = std::min(sink_T, L);
  const double nan = std::numeric_limits<double>::quiet_NaN();

  // Heads and queries are reduced here in one fixed order: batch-independent results.
  std::vector<AttentionLayerStats> out(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    double credit_sum = 0, share_sum = 0, entropy_sum = 0;
    std::int64_t sinks = 0;
    for (std::int64_t h = 0; h < H; ++h) {
      double alpha = 0;
      for (std::int64_t i = 0; i < T; ++i) alpha += v[0][b][h][i];
      if (alpha / static_cast<double>(T) > sink_eps) ++sinks;
      for (std::int64_t i = 1; i < L; ++i) {
        share_sum += v[0][b][h][i];
        credit_sum += v[1][b][h][i];
      }
      for (std::int64_t i = 0; i < L; ++i) entropy_sum += v[2][b][h][i];
    }
    AttentionLayerStats& s = out[static_cast<std::size_t>(b)];
    const double queries_after_first = static_cast<double>(H * (L - 1));
    s.first_attn = L > 1 ? credit_sum / queries_after_first : nan;
    s.first_share = L > 1 ? share_sum / queries_after_first : nan;
    s.sink_fraction = static_cast<double>(sinks) / static_cast<double>(H);
    s.entropy = entropy_sum / static_cast<double>(H * L);
  }
  return out;
}

}  // namespace qeval
