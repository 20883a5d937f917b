#include "stats/hidden_stats.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace qeval {

std::int64_t default_statistics_chunk(const at::Device& device) {
  return device.is_cpu() ? std::int64_t{1} << 18 : std::int64_t{1} << 26;
}

std::vector<HiddenLayerStats> hidden_layer_stats(const at::Tensor& hidden, std::int64_t chunk_elements) {
  QEVAL_CHECK(hidden.dim() == 3, "hidden_layer_stats: hidden state must be [B, L, D], got {} dims", hidden.dim());
  QEVAL_CHECK(at::isFloatingType(hidden.scalar_type()),
              "hidden_layer_stats: hidden state must be floating point, got {}",
              std::string(c10::toString(hidden.scalar_type())));
  if (chunk_elements <= 0) chunk_elements = default_statistics_chunk(hidden.device());
  const std::int64_t B = hidden.size(0), L = hidden.size(1), D = hidden.size(2);
  QEVAL_CHECK(L > 0 && D > 0, "hidden_layer_stats: empty hidden state [{}, {}, {}]", B, L, D);

  // Rows [N = B·L, D] go through in chunks so the float64 temporaries stay small; every
  // reduction runs along D, so a row's result does not depend on the chunking or the batch.
  const std::int64_t N = B * L, chunk = std::max<std::int64_t>(1, chunk_elements / D);
  at::Tensor rows = hidden.detach().reshape({N, D});
  auto dopts = rows.options().dtype(at::kDouble);
  at::Tensor values = at::empty({4, N}, dopts);  // kurtosis, max |x|, ‖x‖∞/‖x‖₂, signed max
  at::Tensor channel = at::empty({N}, rows.options().dtype(at::kLong));
  for (std::int64_t start = 0; start < N; start += chunk) {
    const std::int64_t n = std::min(chunk, N - start);
    at::Tensor h = rows.narrow(0, start, n);                            // [n, D]
    auto max_result = h.abs().max(-1);                                  // exact in any dtype; first maximal channel
    at::Tensor ch = std::get<1>(max_result);                            // [n]
    at::Tensor max_abs = std::get<0>(max_result).to(at::kDouble);       // [n]
    at::Tensor x = h.to(dopts, /*non_blocking=*/false, /*copy=*/true);  // [n, D], owned: modified in place below
    at::Tensor signed_max = x.gather(-1, ch.unsqueeze(-1)).squeeze(-1);
    at::Tensor l2 = x.square().sum(-1).sqrt();
    x.sub_(x.mean(-1, /*keepdim=*/true)).square_();  // (x − μ)²
    at::Tensor m2 = x.mean(-1);
    at::Tensor m4 = x.square_().mean(-1);  // (x − μ)⁴
    at::Tensor out = values.narrow(1, start, n);
    out[0].copy_(m4 / (m2 * m2));
    out[1].copy_(max_abs);
    out[2].copy_(max_abs / l2);
    out[3].copy_(signed_max);
    channel.narrow(0, start, n).copy_(ch);
  }
  values = values.reshape({4, B, L}).cpu().contiguous();
  at::Tensor channels = channel.reshape({B, L}).cpu().contiguous();
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

std::vector<HiddenLayerStats> hidden_layer_stats_from_device(const at::Tensor& stats_in) {
  QEVAL_CHECK(stats_in.dim() == 2 && stats_in.size(1) == 9 && stats_in.scalar_type() == at::kDouble,
              "hidden_layer_stats_from_device: stats must be [B, 9] float64, got {} dims", stats_in.dim());
  const at::Tensor stats = stats_in.cpu().contiguous();
  auto v = stats.accessor<double, 2>();
  std::vector<HiddenLayerStats> out(static_cast<std::size_t>(stats.size(0)));
  for (std::int64_t b = 0; b < stats.size(0); ++b) {
    HiddenLayerStats& s = out[static_cast<std::size_t>(b)];
    s.kurtosis_first = v[b][0], s.kurtosis_rest = v[b][1];
    s.max_abs_first = v[b][2], s.max_abs_rest = v[b][3];
    s.inf_over_l2_first = v[b][4], s.inf_over_l2_rest = v[b][5];
    s.largest_value = v[b][6];
    s.largest_channel = static_cast<std::int64_t>(v[b][7]);
    s.largest_position = static_cast<std::int64_t>(v[b][8]);
  }
  return out;
}

}  // namespace qeval
