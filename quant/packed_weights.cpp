#include "quant/packed_weights.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "kernels/int8_quantize.h"
#include "kernels/w4_gemm.h"
#include "kernels/w4_quantize.h"
#include "quant/quantize.h"

namespace qeval {
namespace {

// The largest magnitude bit pattern (sign cleared) of n floats: an unsigned max, which compilers
// vectorise (a float compare-and-and loop did not: 12 % of int8 quantisation, against 4 % for the
// vectorised absmax). NaN and ±inf are the patterns from 0x7f800000 on.
__attribute__((target_clones("avx512f", "avx2", "default"))) std::uint32_t max_magnitude_bits(const float* p,
                                                                                              std::int64_t n) {
  std::uint32_t m = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, p + i, sizeof u);
    u &= 0x7fffffffu;
    m = u > m ? u : m;
  }
  return m;
}

// Whether every value is finite: on the CPU one threaded pass with no temporary, where ATen's
// isfinite().all() wrote a bool tensor of the weight's size and faulted its pages in (a third of
// a 4-bit weight's quantisation).
bool all_finite(const at::Tensor& w) {
  if (!w.is_cpu() || !w.is_contiguous()) return at::isfinite(w).all().item<bool>();
  const float* p = w.data_ptr<float>();
  std::atomic<bool> finite{true};
  at::parallel_for(0, w.numel(), 1 << 16, [&](std::int64_t begin, std::int64_t end) {
    if (max_magnitude_bits(p + begin, end - begin) >= 0x7f800000u) finite = false;
  });
  return finite;
}

void check_weight_shape(const at::Tensor& w, const std::string& name) {
  QEVAL_CHECK(w.defined() && w.dim() == 2 && w.scalar_type() == at::kFloat,
              "quantise {}: expected a float32 [out, in] weight", name);
  QEVAL_CHECK(w.size(0) > 0 && w.size(1) > 0, "quantise {}: empty weight [{}, {}]", name, w.size(0), w.size(1));
}

void check_finite(bool finite, const std::string& name) {
  QEVAL_CHECK(finite, "quantise {}: the weight holds NaN or infinite values", name);
}

// The shape and spec of a 4-bit weight; check_w4 adds the finiteness pass.
void check_w4_spec(const at::Tensor& w, const QuantSpec& spec, const std::string& name) {
  check_weight_shape(w, name);
  QEVAL_CHECK(spec.kind == QuantKind::int4_zeropoint, "quantise {}: expected an int4_zeropoint spec", name);
  QEVAL_CHECK(spec.granularity == Granularity::tensor || spec.granularity == Granularity::channel ||
                  spec.granularity == Granularity::group,
              "quantise {}: weight granularity {} is not tensor, channel or group", name, spec.granularity_name());
}

void check_w4(const at::Tensor& w, const QuantSpec& spec, const std::string& name) {
  check_w4_spec(w, spec, name);
  check_finite(all_finite(w), name);
}

W4Weight w4_composition(const at::Tensor& w, const QuantSpec& spec);

// Group size along K for a weight granularity (tensor handled by the callers).
std::int64_t group_size_for(const QuantSpec& spec, std::int64_t K) {
  return spec.granularity == Granularity::group ? std::min(spec.group_size, K) : K;
}

// [N, G, g] view of w for per-(row, group) statistics. The last group is padded to g by
// repeating the row's last value, which changes neither max |x| nor min nor max.
at::Tensor grouped(const at::Tensor& w, std::int64_t g) {
  const std::int64_t N = w.size(0), K = w.size(1), G = (K + g - 1) / g;
  at::Tensor padded = G * g == K ? w : at::cat({w, w.narrow(1, K - 1, 1).expand({N, G * g - K})}, 1);
  return padded.reshape({N, G, g});
}

// [N, G] per-group values → [N, K].
at::Tensor expand_groups(const at::Tensor& per_group, std::int64_t K, std::int64_t g) {
  at::Tensor group_of_k = at::div(at::arange(K, per_group.options().dtype(at::kLong)), g, "floor").to(at::kLong);
  return per_group.index_select(1, group_of_k);
}

}  // namespace

at::Tensor Int8Weight::dequantize(at::ScalarType dtype) const {
  const at::Tensor s = scales.to(dtype);
  if (group_size > 0) return int8_dequantize(q, expand_groups(s, q.size(1), group_size));
  return int8_dequantize(q, s.numel() == 1 ? s : s.unsqueeze(1));
}

std::int64_t Int8Weight::bytes() const { return q.numel() + scales.numel() * 4; }

at::Tensor W4Weight::dequantize() const { return kernels::w4_dequantize(qweight, scales, zeros, K, group_size); }

std::int64_t W4Weight::bytes() const { return qweight.numel() + scales.numel() * 4 + zeros.numel() * 4; }

Int8Weight quantize_int8_weight(const at::Tensor& w, const QuantSpec& spec, const std::string& name,
                                std::optional<float> max_abs) {
  check_weight_shape(w, name);
  QEVAL_CHECK(spec.kind == QuantKind::int8_absmax, "quantise {}: expected an int8_absmax spec", name);
  const std::int64_t N = w.size(0), K = w.size(1);
  // The CPU row kernel's scales are finite exactly when the weight is (its absmax keeps NaN and
  // infinities): checking them spares a whole read of the weight. The other paths check first.
  const bool scales_show_finite =
      w.is_cpu() && (spec.granularity == Granularity::tensor || spec.granularity == Granularity::channel);
  if (!scales_show_finite) check_finite(all_finite(w), name);
  Int8Weight out;
  switch (spec.granularity) {
    // Tensor and channel scales are the fused row kernel's groups of N rows and of one row
    // (kernels/int8_quantize.h): one threaded, vectorised pass for the scales and one for the
    // codes, the same bits as int8_absmax_scale + int8_quantize (tests/quant/quantize_test.cpp),
    // where the ATen composition made five passes and four temporaries of the weight's size
    // (a Llama-3-8B layer: 25 s a scheme over 32 layers, 70 % of a 7-preset run, issue 50).
    case Granularity::tensor: {
      if (!w.is_cpu()) {  // on a GPU: the reference composition, which ATen runs there with the same bits
        out.scales = int8_absmax_scale(w, {0, 1}).reshape({1});
        out.q = int8_quantize(w, out.scales);
        break;
      }
      kernels::Int8Rows rows =
          max_abs ? kernels::quantize_int8_matrix_with_max_abs(w, *max_abs) : kernels::quantize_int8_rows(w, N);
      out.q = rows.q;
      out.scales = rows.scales.reshape({1});
      break;
    }
    case Granularity::channel: {
      if (!w.is_cpu()) {
        at::Tensor s = int8_absmax_scale(w, {1});  // [N, 1]
        out.q = int8_quantize(w, s);
        out.scales = s.reshape({N});
        break;
      }
      kernels::Int8Rows rows = kernels::quantize_int8_rows(w, 1);
      out.q = rows.q;
      out.scales = rows.scales.reshape({N});
      break;
    }
    case Granularity::group: {
      out.group_size = group_size_for(spec, K);
      at::Tensor s = int8_absmax_scale(grouped(w, out.group_size), {2}).squeeze(2);  // [N, G]
      out.q = int8_quantize(w, expand_groups(s, K, out.group_size));
      out.scales = s.contiguous();
      break;
    }
    default: fail("quantise {}: weight granularity {} is not tensor, channel or group", name, spec.granularity_name());
  }
  if (scales_show_finite) check_finite(all_finite(out.scales.contiguous()), name);
  out.q = out.q.contiguous();
  return out;
}

W4Weight quantize_w4_weight(const at::Tensor& w, const QuantSpec& spec, const std::string& name) {
  check_w4_spec(w, spec, name);
  if (!w.is_cpu()) {
    check_finite(all_finite(w), name);
    return w4_composition(w, spec);
  }
  // On the CPU: one threaded, vectorised pass (kernels/w4_quantize.h), the same bits as the
  // reference composition (tests/quant/quantize_test.cpp); its min/max pass finds whether the
  // weight is finite, so no pass of its own checks it.
  const std::int64_t K = w.size(1);
  W4Weight out;
  out.K = K;
  out.group_size = spec.granularity == Granularity::tensor ? K : group_size_for(spec, K);
  kernels::W4Rows rows = kernels::quantize_w4_rows(w, out.group_size, spec.granularity == Granularity::tensor);
  check_finite(rows.finite, name);
  out.qweight = rows.packed;
  out.scales = rows.scales;
  out.zeros = rows.zeros;
  return out;
}

W4Weight quantize_w4_weight_reference(const at::Tensor& w, const QuantSpec& spec, const std::string& name) {
  check_w4(w, spec, name);
  return w4_composition(w, spec);
}

namespace {

// quant/quantize.h's reference maths on a checked weight, any device.
W4Weight w4_composition(const at::Tensor& w, const QuantSpec& spec) {
  const std::int64_t N = w.size(0), K = w.size(1);
  W4Weight out;
  out.K = K;
  ZeroPointParams p;  // [N, G]
  switch (spec.granularity) {
    case Granularity::tensor: {
      out.group_size = K;
      ZeroPointParams one = zeropoint4_params(w, {0, 1});  // [1, 1]
      p = {one.scale.expand({N, 1}).contiguous(), one.zero.expand({N, 1}).contiguous()};
      break;
    }
    case Granularity::channel:
    case Granularity::group: {
      out.group_size = group_size_for(spec, K);
      ZeroPointParams g = zeropoint4_params(grouped(w, out.group_size), {2});  // [N, G, 1]
      p = {g.scale.squeeze(2).contiguous(), g.zero.squeeze(2).contiguous()};
      break;
    }
    default: fail("w4_composition: granularity {} reached unchecked", spec.granularity_name());
  }
  ZeroPointParams expanded{expand_groups(p.scale, K, out.group_size), expand_groups(p.zero, K, out.group_size)};
  out.qweight = kernels::pack_u4(zeropoint4_quantize(w, expanded));
  out.scales = p.scale;
  out.zeros = p.zero;
  return out;
}

}  // namespace
}  // namespace qeval
