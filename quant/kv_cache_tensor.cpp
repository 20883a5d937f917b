#include "quant/kv_cache_tensor.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "quant/formats/integer.h"
#include "quant/formats/minifloat.h"

namespace qeval {
namespace {

at::Tensor absmax_along_rows(const at::Tensor& x) { return x.abs().amax(-1, /*keepdim=*/true); }

// 1 / d, 0 where d = 0 (ggml's `d ? 1.0f/d : 0.0f`).
at::Tensor reciprocal_or_zero(const at::Tensor& d) {
  return at::where(d != 0, divisor(1.0f, d) / d, at::zeros_like(d));
}

// roundf: half away from zero. y − trunc(y) is exact, so the comparison with 0.5 is too.
at::Tensor round_half_away(const at::Tensor& y) {
  const at::Tensor t = y.trunc();
  return t + at::where((y - t).abs() >= 0.5, y.sign(), at::zeros_like(y));
}

// ggml's fp16(d) as dequantisation reads it: float32 → float16 (nearest, ties to even) → float32.
at::Tensor through_fp16(const at::Tensor& d) { return d.to(at::kHalf).to(at::kFloat); }

// quant/formats/minifloat.h's round_to_element, operation for operation: a = min(|v|, max), the grid's
// spacing from a's float32 exponent, (a + C) − C rounds to it, the sign put back.
at::Tensor round_to_element(const at::Tensor& v, const ElementFormat& f) {
  const at::Tensor a = v.abs().clamp_max(f.max_finite);
  const at::Tensor e = (at::bitwise_right_shift(a.view(at::kInt), 23) - 127).clamp_min(f.emin);
  const at::Tensor c = at::bitwise_left_shift(e + (127 + 23 - f.mantissa_bits), 23).view(at::kFloat);
  return at::copysign((a + c) - c, v);
}

// quant/quantize.h's int8 absmax per row.
at::Tensor int8_rows(const at::Tensor& x) {
  const at::Tensor s = int8_absmax_scale(x, {-1});
  return int8_dequantize(int8_quantize(x, s), s);
}

at::Tensor fp8_e4m3_rows(const at::Tensor& x) {
  const ElementFormat& f = element_format(ElementType::e4m3);
  const at::Tensor amax = absmax_along_rows(x);
  const at::Tensor s = at::where(amax == 0, at::ones_like(amax), amax / divisor(f.max_finite, amax));
  return round_to_element(x / s, f) * s;
}

// [..., n] → [rows, n / 32, 32] blocks of ggml's formats.
at::Tensor ggml_blocks(const at::Tensor& x, const char* format) {
  const std::int64_t n = x.size(-1);
  QEVAL_CHECK(n % kKvGgmlBlock == 0, "kv_cache: a row of {} values is not whole blocks of 32 ({})", n, format);
  return x.reshape({-1, n / kKvGgmlBlock, kKvGgmlBlock});
}

// ggml's quantize_row_q8_0 then dequantize_row_q8_0. Where d is a float32 subnormal, 1/d is
// infinite and x·(1/d) is ±inf or NaN: quant/formats/ggml/legacy_quants.cpp (as ggml compiled for x86-64
// does) gives those code 0, and so does this.
at::Tensor q8_0_rows(const at::Tensor& x) {
  const at::Tensor b = ggml_blocks(x, "q8_0");
  const at::Tensor d = absmax_along_rows(b) / divisor(127.0f, b);
  const at::Tensor scaled = b * reciprocal_or_zero(d);
  const at::Tensor q = round_half_away(at::where(scaled.abs() < 8388608.0, scaled, at::zeros_like(scaled)));
  return (q * through_fp16(d)).reshape(x.sizes());
}

// ggml's quantize_row_q4_0 then dequantize_row_q4_0: m is the first value of largest magnitude
// (+0 in a block of zeros, as ggml's running maximum starts), d = m / −8.
at::Tensor q4_0_rows(const at::Tensor& x) {
  const at::Tensor b = ggml_blocks(x, "q4_0");
  const at::Tensor first_largest = b.gather(-1, b.abs().argmax(-1, /*keepdim=*/true));
  const at::Tensor m = at::where(first_largest == 0, at::zeros_like(first_largest), first_largest);
  const at::Tensor d = m / divisor(-8.0f, m);
  // x·(1/d) + 8.5 lies in [0, 16.5] for every finite 1/d; an infinite one (d a float32 subnormal)
  // makes it ±inf or NaN, which ggml's (int8_t) cast on x86-64 turns into code 0.
  const at::Tensor t = b * reciprocal_or_zero(d) + 8.5;
  const at::Tensor q = at::where(t.abs() < 2147483648.0, t.trunc(), at::zeros_like(t)).clamp_max(15);
  return ((q - 8) * through_fp16(d)).reshape(x.sizes());
}

// quant/quantize.h's 4-bit zero-point on groups [..., groups, size] (constant groups exact).
at::Tensor int4_groups(const at::Tensor& g) {
  const ZeroPointParams p = zeropoint4_params(g, {-1});
  return zeropoint4_dequantize(zeropoint4_quantize(g, p), p);
}

// Groups of `size` along the row, the last one shorter.
at::Tensor int4_rows(const at::Tensor& x, std::int64_t size) {
  const std::int64_t n = x.size(-1), whole = n / size * size;
  std::vector<at::Tensor> parts;
  if (whole > 0) parts.push_back(int4_groups(x.narrow(-1, 0, whole).reshape({-1, whole / size, size})).reshape({-1, whole}));
  if (whole < n) parts.push_back(int4_groups(x.narrow(-1, whole, n - whole).reshape({-1, 1, n - whole})).reshape({-1, n - whole}));
  return at::cat(parts, -1).reshape(x.sizes());
}

// quant/kv_cache.h's hadamard_blocks, butterfly for butterfly: within each 2h values, the first h
// become a + c and the next h a − c; then the 1/√b of ggml_gen_hadamard.
at::Tensor hadamard_tensor(const at::Tensor& x, std::int64_t b) {
  const std::int64_t n = x.size(-1);
  at::Tensor v = x.reshape({-1, n / b, b});
  const std::int64_t rows = v.size(0);
  for (std::int64_t h = 1; h < b; h *= 2) {
    const at::Tensor pairs = v.reshape({rows, n / b, b / (2 * h), 2, h});
    const at::Tensor a = pairs.select(3, 0), c = pairs.select(3, 1);
    v = at::stack({a + c, a - c}, 3).reshape({rows, n / b, b});
  }
  const float norm = 1.0f / std::sqrt(static_cast<float>(b));
  return (v * norm).reshape(x.sizes());
}

at::Tensor round_trip_format(const at::Tensor& x, const KvCacheSpec& spec) {
  switch (spec.format) {
    case KvCacheFormat::none: return x;
    case KvCacheFormat::int8: return int8_rows(x);
    case KvCacheFormat::fp8_e4m3: return fp8_e4m3_rows(x);
    case KvCacheFormat::q8_0: return q8_0_rows(x);
    case KvCacheFormat::q4_0: return q4_0_rows(x);
    case KvCacheFormat::int4: return int4_rows(x, spec.group_size);
  }
  return x;
}

}  // namespace

std::int64_t kv_rotation_block(std::int64_t head_dim, bool is_key) {
  QEVAL_CHECK(head_dim > 0 && head_dim % 64 == 0, "kv_cache rotation: head_dim {} is not a multiple of 64", head_dim);
  std::int64_t b = 64;
  if (is_key)
    while (head_dim % (2 * b) == 0) b *= 2;
  return b;
}

at::Tensor kv_round_trip_tensor(const at::Tensor& x, const KvCacheSpec& spec, bool is_key) {
  QEVAL_CHECK(x.dim() >= 1 && at::isFloatingType(x.scalar_type()),
              "kv_round_trip_tensor: expected floating-point values [..., head_dim], found {} with {} dims",
              c10::toString(x.scalar_type()), x.dim());
  if (spec.format == KvCacheFormat::none || x.numel() == 0) return x;
  at::Tensor v = x.to(at::kFloat).contiguous();
  const std::int64_t block =
      spec.rotation == KvCacheRotation::hadamard ? kv_rotation_block(x.size(-1), is_key) : 0;
  if (block > 0) v = hadamard_tensor(v, block);
  at::Tensor y = round_trip_format(v, spec);
  if (block > 0) y = hadamard_tensor(y, block);
  return y.to(x.scalar_type());
}

}  // namespace qeval
