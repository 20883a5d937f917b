#include "quant/formats/bitsandbytes.h"

#include <cmath>

#include "common/error.h"
#include "quant/formats/stored_tensors.h"

namespace qeval {

const std::array<float, 16>& bnb_4bit_table(BnbQuantType type) {
  static const std::array<float, 16> nf4 = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
      -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
      0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
  static const std::array<float, 16> fp4 = [] {
    // get_4bit_type writes code 8 as the Python integer `-0`, which is +0.0 in its float32 table
    const std::array<float, 16> raw = {0.0f, 0.0625f, 8.0f, 12.0f, 4.0f, 6.0f, 2.0f, 3.0f,
                                       0.0f, -0.0625f, -8.0f, -12.0f, -4.0f, -6.0f, -2.0f, -3.0f};
    std::array<float, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = raw[i] / 12.0f;  // data.div_(data.abs().max()) in float32
    return t;
  }();
  return type == BnbQuantType::nf4 ? nf4 : fp4;
}

at::Tensor bnb_dequantize_4bit(const Bnb4bitWeight& w, std::int64_t N, std::int64_t K, std::string_view name) {
  const std::int64_t n = N * K, B = w.blocksize, blocks = (n + B - 1) / B;
  QEVAL_CHECK(B == 32 || B == 64 || B == 128 || B == 256 || B == 512 || B == 1024 || B == 2048 || B == 4096,
              "{}: blocksize {} is not one bitsandbytes accepts (32 … 4096, powers of two)", name, B);
  const at::Tensor packed = stored_tensor(w.weight, name, "weight", {(n + 1) / 2, 1}, {at::kByte});
  at::Tensor absmax;
  if (!w.nested()) {
    absmax = float32_scales(stored_tensor(w.absmax, name, "absmax", {blocks}, {at::kFloat}), name, "absmax");
  } else {
    const std::int64_t B2 = w.nested_blocksize, blocks2 = (blocks + B2 - 1) / B2;
    QEVAL_CHECK(B2 > 0, "{}: nested_blocksize {} must be positive", name, B2);
    QEVAL_CHECK(std::isfinite(w.nested_offset), "{}: nested_offset {} is not finite", name, w.nested_offset);
    const at::Tensor codes = stored_tensor(w.absmax, name, "absmax", {blocks}, {at::kByte});
    const at::Tensor n_absmax =
        float32_scales(stored_tensor(w.nested_absmax, name, "nested_absmax", {blocks2}, {at::kFloat}), name, "nested_absmax");
    const at::Tensor map =
        float32_scales(stored_tensor(w.nested_quant_map, name, "nested_quant_map", {256}, {at::kFloat}), name, "nested_quant_map");
    absmax = at::empty({blocks}, at::kFloat);
    const std::uint8_t* c = codes.data_ptr<std::uint8_t>();
    const float *na = n_absmax.data_ptr<float>(), *m = map.data_ptr<float>();
    float* a = absmax.data_ptr<float>();
    for (std::int64_t j = 0; j < blocks; ++j) {
      const float product = m[c[j]] * na[j / B2];
      a[j] = product + w.nested_offset;
    }
    check_finite(absmax, name, "absmax (expanded from nested_absmax)");
  }
  const std::array<float, 16>& table = bnb_4bit_table(w.quant_type);
  const std::uint8_t* p = packed.data_ptr<std::uint8_t>();
  const float* a = absmax.data_ptr<float>();
  at::Tensor out = at::empty({N, K}, at::kFloat);
  float* o = out.data_ptr<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const int code = (i % 2 == 0) ? (p[i / 2] >> 4) : (p[i / 2] & 0x0f);
    o[i] = table[code] * a[i / B];
  }
  return out;
}

at::Tensor bnb_dequantize_int8(const at::Tensor& weight, const at::Tensor& scb, std::int64_t N, std::int64_t K,
                               std::string_view name) {
  const at::Tensor q = stored_tensor(weight, name, "weight", {N, K}, {at::kChar});
  const at::Tensor s = float32_scales(stored_tensor(scb, name, "SCB", {N}, {at::kFloat, at::kHalf, at::kBFloat16}), name, "SCB");
  const std::int8_t* pq = q.data_ptr<std::int8_t>();
  const float* ps = s.data_ptr<float>();
  constexpr float kInv127 = static_cast<float>(7.874015718698502e-3);
  at::Tensor out = at::empty({N, K}, at::kFloat);
  float* o = out.data_ptr<float>();
  for (std::int64_t r = 0; r < N; ++r)
    for (std::int64_t k = 0; k < K; ++k) {
      const float product = static_cast<float>(pq[r * K + k]) * ps[r];
      o[r * K + k] = product * kInv127;
    }
  return out;
}

}  // namespace qeval
