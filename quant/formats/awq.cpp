#include "quant/formats/awq.h"

#include <vector>

#include "common/error.h"
#include "quant/formats/stored_tensors.h"

namespace qeval {

namespace {

// The 4-bit field of column n in a row of interleaved words.
std::int32_t awq_field(const std::int32_t* row, std::int64_t n) {
  static constexpr std::array<int, 8> slot = {0, 4, 1, 5, 2, 6, 3, 7};  // column n % 8 → nibble (inverse of kAwqOrder)
  return static_cast<std::int32_t>((static_cast<std::uint32_t>(row[n / 8]) >> (4 * slot[n % 8])) & 0xfu);
}

}  // namespace

at::Tensor awq_gemm_dequantize(const at::Tensor& qweight, const at::Tensor& qzeros, const at::Tensor& scales, int bits,
                               std::int64_t group_size, std::int64_t N, std::int64_t K, std::string_view name) {
  QEVAL_CHECK(bits == 4, "{}: w_bit {} is not an AWQ GEMM width (4)", name, bits);
  QEVAL_CHECK(N % 8 == 0, "{}: AWQ GEMM packs 8 output channels per word, {} is not a multiple of 8", name, N);
  const std::int64_t g = group_size == -1 ? K : group_size;
  QEVAL_CHECK(g > 0 && K % g == 0, "{}: q_group_size {} does not divide the {} input features", name, group_size, K);
  const std::int64_t G = K / g;
  const at::Tensor qw = stored_tensor(qweight, name, "qweight", {K, N / 8}, {at::kInt});
  const at::Tensor qz = stored_tensor(qzeros, name, "qzeros", {G, N / 8}, {at::kInt});
  const at::Tensor s = float32_scales(stored_tensor(scales, name, "scales", {G, N}, {at::kHalf, at::kBFloat16, at::kFloat}), name,
                                      "scales");
  const std::int32_t *pw = qw.data_ptr<std::int32_t>(), *pz = qz.data_ptr<std::int32_t>();
  const float* ps = s.data_ptr<float>();
  at::Tensor out = at::empty({N, K}, at::kFloat);
  float* o = out.data_ptr<float>();
  for (std::int64_t k = 0; k < K; ++k) {
    const std::int64_t gg = k / g;
    for (std::int64_t n = 0; n < N; ++n) {
      const std::int32_t d = awq_field(pw + k * (N / 8), n) - awq_field(pz + gg * (N / 8), n);
      o[n * K + k] = static_cast<float>(d) * ps[gg * N + n];
    }
  }
  return out;
}

}  // namespace qeval
