#include "quant/formats/gptq.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "quant/formats/packed_bits.h"
#include "quant/formats/stored_tensors.h"

namespace qeval {

at::Tensor gptq_dequantize(const GptqWeight& w, const GptqArgs& args, std::int64_t N, std::int64_t K, std::string_view name) {
  const int b = args.bits;
  QEVAL_CHECK(b == 2 || b == 3 || b == 4 || b == 8, "{}: bits {} is not a GPTQ width (2, 3, 4 or 8)", name, b);
  QEVAL_CHECK(args.group_size == -1 || args.group_size > 0, "{}: group_size {} must be positive or -1", name, args.group_size);
  const std::int64_t g = args.group_size == -1 ? K : args.group_size, G = K / g + (K % g != 0);  // no overflow for huge g
  const at::Tensor qweight = stored_tensor(w.qweight, name, "qweight", {stream_words(K, b), N}, {at::kInt});
  const at::Tensor qzeros = stored_tensor(w.qzeros, name, "qzeros", {G, stream_words(N, b)}, {at::kInt});
  const at::Tensor scales = float32_scales(stored_tensor(w.scales, name, "scales", {G, N}, {at::kHalf, at::kBFloat16, at::kFloat}),
                                           name, "scales");
  std::vector<std::int64_t> group(K);
  for (std::int64_t k = 0; k < K; ++k) group[k] = k / g;
  if (w.g_idx.defined()) {
    const at::Tensor gi = stored_tensor(w.g_idx, name, "g_idx", {K}, {at::kInt, at::kLong}).to(at::kLong);
    const std::int64_t* p = gi.data_ptr<std::int64_t>();
    for (std::int64_t k = 0; k < K; ++k) {
      QEVAL_CHECK(p[k] >= 0 && p[k] < G, "{}: g_idx[{}] = {} is outside the {} groups [0, {})", name, k, p[k], G, G);
      QEVAL_CHECK(args.desc_act || p[k] == group[k],
                  "{}: g_idx[{}] = {} is inconsistent with group_size {} (expected {}) while desc_act is false", name, k, p[k],
                  g, group[k]);
      group[k] = p[k];
    }
  }
  const std::int32_t *qw = qweight.data_ptr<std::int32_t>(), *qz = qzeros.data_ptr<std::int32_t>();
  const float* s = scales.data_ptr<float>();
  const std::int64_t zero_words = qzeros.size(1);
  const int plus = args.format == GptqFormat::v1 ? 1 : 0;
  std::vector<float> zero(static_cast<std::size_t>(G * N));
  for (std::int64_t gg = 0; gg < G; ++gg)
    for (std::int64_t n = 0; n < N; ++n)
      zero[gg * N + n] = static_cast<float>(static_cast<std::int32_t>(stream_field(qz + gg * zero_words, 1, n, b)) + plus);
  at::Tensor out = at::empty({N, K}, at::kFloat);
  float* o = out.data_ptr<float>();
  // Columns n of qweight in tiles of 16 (one cache line of words per stream row), in parallel:
  // each tile's words are read once, row of words by row of words.
  constexpr std::int64_t kTile = 16;
  at::parallel_for(0, (N + kTile - 1) / kTile, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t n0 = t0 * kTile; n0 < std::min(N, t1 * kTile); n0 += kTile) {
      const std::int64_t n1 = std::min(N, n0 + kTile);
      for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t row = group[k] * N;
        for (std::int64_t n = n0; n < n1; ++n) {
          const float code = static_cast<float>(stream_field(qw + n, N, k, b));
          o[n * K + k] = s[row + n] * (code - zero[row + n]);
        }
      }
    }
  });
  return out;
}

}  // namespace qeval
