#include "eval/hidden_stats.h"

#include <limits>

#include "common/error.h"

namespace qeval {

std::vector<HiddenLayerStats> hidden_layer_stats(const at::Tensor& hidden) {
  QEVAL_CHECK(hidden.dim() == 3, "hidden_layer_stats: hidden state must be [B, L, D], got {} dims", hidden.dim());
  QEVAL_CHECK(at::isFloatingType(hidden.scalar_type()), "hidden_layer_stats: hidden state must be floating point, got {}",
              std::string(c10::toString(hidden.scalar_type())));
  const std::int64_t B = hidden.size(0), L = hidden.size(1), D = hidden.size(2);
  QEVAL_CHECK(L > 0 && D > 0, "hidden_layer_stats: empty hidden state [{}, {}, {}]", B, L, D);

  // Every reduction runs along D (the last axis) on the whole batch at once.
  at::Tensor x = hidden.detach().to(at::kDouble).contiguous();  // [B, L, D]
  at::Tensor centred = x - x.mean(-1, /*keepdim=*/true);
  at::Tensor c2 = centred * centred;
  at::Tensor m2 = c2.mean(-1);                                   // [B, L]
  at::Tensor m4 = (c2 * c2).mean(-1);                            // [B, L]
  at::Tensor kurtosis = m4 / (m2 * m2);                          // [B, L]
  auto max_result = x.abs().max(-1);                             // first maximal channel on ties
  at::Tensor max_abs = std::get<0>(max_result);                  // [B, L]
  at::Tensor channel = std::get<1>(max_result);                  // [B, L] int64
  at::Tensor l2 = (x * x).sum(-1).sqrt();                        // [B, L]
  at::Tensor signed_max = x.gather(-1, channel.unsqueeze(-1)).squeeze(-1);  // [B, L]

  at::Tensor values = at::stack({kurtosis, max_abs, max_abs / l2, signed_max}).cpu().contiguous();  // [4, B, L]
  at::Tensor channels = channel.cpu().contiguous();
  auto v = values.accessor<double, 3>();
  auto ch = channels.accessor<std::int64_t, 2>();

  // Positions are reduced here in one fixed order, so a sequence's numbers never depend on its batch.
  auto rest_mean = [&](int k, std::int64_t b) {
    if (L < 2) return std::numeric_limits<double>::quiet_NaN();
    double sum = 0;
    for (std::int64_t l = 1; l < L; ++l) sum += v[k][b][l];
    return sum / static_cast<double>(L - 1);
  };
  std::vector<HiddenLayerStats> out(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    HiddenLayerStats& s = out[static_cast<std::size_t>(b)];
    s.kurtosis_first = v[0][b][0];
    s.kurtosis_rest = rest_mean(0, b);
    s.max_abs_first = v[1][b][0];
    s.max_abs_rest = rest_mean(1, b);
    s.inf_over_l2_first = v[2][b][0];
    s.inf_over_l2_rest = rest_mean(2, b);
    std::int64_t best = 0;
    for (std::int64_t l = 1; l < L; ++l)
      if (v[1][b][l] > v[1][b][best]) best = l;
    s.largest_value = v[3][b][best];
    s.largest_channel = ch[b][best];
    s.largest_position = best;
  }
  return out;
}

}  // namespace qeval
