#include "quant/float_quantize.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "kernels/large_tensor.h"
#include "kernels/cpu/int8_quantize_cpu.h"
#include "quant/formats/mx.h"
#include "quant/formats/nvfp4.h"

namespace qeval {
namespace {

// Rows per parallel task: enough work to amortise a task, few enough to spread over threads.
constexpr std::int64_t kGrain = 16;

// Vectorised (the scalar loop is one dependent max per element: it was most of fp8's compute).
float absmax(const float* x, std::int64_t n) { return kernels::cpu::row_absmax(x, n); }

// max that keeps NaN (std::max drops it when it comes second): a NaN value makes its scale NaN,
// so its row, block or tensor rounds to NaN instead of to a number.
template <typename T>
T max_keeping_nan(T a, T b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
}

double absmax(const double* x, std::int64_t n) {
  double m = 0;
  for (std::int64_t i = 0; i < n; ++i) m = max_keeping_nan(m, std::fabs(x[i]));
  return m;
}

// amax / largest finite, an IEEE division in float32; 1 for amax = 0.
float fp8_scale(float amax, const ElementFormat& f) { return amax == 0 ? 1.0f : amax / f.max_finite; }
double fp8_scale(double amax, const ElementFormat& f) {
  // float64 paths divide in float64: the scale itself is then the exact quotient's rounding.
  return amax == 0 ? 1.0 : amax / static_cast<double>(f.max_finite);
}

// rows × K, each row with its own fp8 scale (channel, token).
template <typename T>
void fp8_rows(const T* x, T* y, std::int64_t rows, std::int64_t K, const ElementFormat& f) {
  at::parallel_for(0, rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const T s = fp8_scale(absmax(x + r * K, K), f);
      if constexpr (std::is_same_v<T, float>)
        element_round_trip(x + r * K, y + r * K, K, s, f);
      else
        element_round_trip(x + r * K, y + r * K, K, s, f.type);
    }
  });
}

// n values sharing one scale, in parallel chunks.
template <typename T>
void scaled_chunks(const T* x, T* y, std::int64_t n, T s, const ElementFormat& f) {
  at::parallel_for(0, n, 4096, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<T, float>)
      element_round_trip(x + begin, y + begin, end - begin, s, f);
    else
      element_round_trip(x + begin, y + begin, end - begin, s, f.type);
  });
}

// A whole tensor's (or sequence's) max |x| on every thread, NaN kept: float32 through the read's
// pass (kernels/cpu/int8_quantize_cpu.h), float64 (`--dtype fp64`) here.
float parallel_absmax(const float* x, std::int64_t n) { return kernels::cpu::parallel_absmax(x, n); }
double parallel_absmax(const double* x, std::int64_t n) {
  return at::parallel_reduce(
      0, n, 1 << 16, 0.0, [&](std::int64_t b, std::int64_t e, double m) { return max_keeping_nan(m, absmax(x + b, e - b)); },
      [](double a, double b) { return max_keeping_nan(a, b); });
}

template <typename T>
void mx_rows(const T* x, T* y, std::int64_t rows, std::int64_t K, const MxFormat& format) {
  at::parallel_for(0, rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      if constexpr (std::is_same_v<T, float>)
        mx_round_trip_row(x + r * K, y + r * K, K, format);
      else
        mx_round_trip_row_reference(x + r * K, y + r * K, K, format);
    }
  });
}

void nvfp4_tensor(const float* x, float* y, std::int64_t rows, std::int64_t K, float amax_t) {
  at::parallel_for(0, rows, kGrain, [&](std::int64_t begin, std::int64_t end) {
    nvfp4_round_trip(x + begin * K, y + begin * K, end - begin, K, amax_t);
  });
}

MxFormat mx_format(const QuantSpec& spec) { return {spec.element, spec.group_size, spec.scale_round_up}; }

void check_float_format(const QuantSpec& spec, const char* what) {
  QEVAL_CHECK(spec.is_float_format(), "{}: expected an fp8, mx or nvfp4 spec, got {}", what, to_string(spec.kind));
}

}  // namespace

at::Tensor fake_quantize_float_weight(const at::Tensor& w_in, const QuantSpec& spec, std::optional<float> max_abs) {
  check_float_format(spec, "fake_quantize_float_weight");
  QEVAL_CHECK(w_in.dim() == 2 && w_in.scalar_type() == at::kFloat, "fake_quantize_float_weight: expected [N, K] float32");
  const at::Tensor w = w_in.contiguous();
  const std::int64_t N = w.size(0), K = w.size(1);
  at::Tensor out = kernels::empty_written_once({N, K}, at::kFloat);
  const float* x = w.data_ptr<float>();
  float* y = out.data_ptr<float>();
  const ElementFormat& f = element_format(spec.element);
  // The tensor's max |w|: the read's when known (a maximum is exact in any order), else a pass.
  auto tensor_max_abs = [&] { return max_abs ? *max_abs : parallel_absmax(x, N * K); };
  switch (spec.kind) {
    case QuantKind::fp8:
      if (spec.granularity == Granularity::channel)
        fp8_rows(x, y, N, K, f);
      else
        scaled_chunks(x, y, N * K, fp8_scale(tensor_max_abs(), f), f);
      break;
    case QuantKind::mx: mx_rows(x, y, N, K, mx_format(spec)); break;
    case QuantKind::nvfp4: nvfp4_tensor(x, y, N, K, tensor_max_abs()); break;
    default: break;
  }
  return out;
}

at::Tensor fake_quantize_float_activations(const at::Tensor& x_in, const QuantSpec& spec) {
  check_float_format(spec, "fake_quantize_float_activations");
  QEVAL_CHECK(x_in.dim() == 3 && (x_in.scalar_type() == at::kFloat || x_in.scalar_type() == at::kDouble),
              "fake_quantize_float_activations: expected [B, L, K] float32 or float64, got {} dims", x_in.dim());
  // The GPU has no kernel for these formats yet: they round on the CPU and go back (exact).
  if (!x_in.device().is_cpu()) return fake_quantize_float_activations(x_in.cpu(), spec).to(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const std::int64_t B = x.size(0), L = x.size(1), K = x.size(2);
  at::Tensor out = at::empty_like(x);
  const ElementFormat& f = element_format(spec.element);
  auto run = [&](auto* px, auto* py) {
    using T = std::remove_pointer_t<decltype(px)>;
    switch (spec.kind) {
      case QuantKind::fp8:
        if (spec.granularity == Granularity::token) {
          fp8_rows(px, py, B * L, K, f);
        } else {
          for (std::int64_t b = 0; b < B; ++b)  // one scale per sequence
            scaled_chunks(px + b * L * K, py + b * L * K, L * K, fp8_scale(parallel_absmax(px + b * L * K, L * K), f), f);
        }
        break;
      case QuantKind::mx: mx_rows(px, py, B * L, K, mx_format(spec)); break;
      case QuantKind::nvfp4:
        for (std::int64_t b = 0; b < B; ++b) {  // the tensor scale of each sequence
          if constexpr (std::is_same_v<T, float>) {
            nvfp4_tensor(px + b * L * K, py + b * L * K, L, K, parallel_absmax(px + b * L * K, L * K));
          } else {
            // float64: the float32 order of operations on float32-rounded inputs is NVFP4's
            // definition; the reference computes it (float64 inputs are rounded to float32 first).
            const at::Tensor xb = x[b].to(at::kFloat).contiguous();
            at::Tensor yb = at::empty_like(xb);
            const float* fx = xb.data_ptr<float>();
            nvfp4_round_trip_reference(fx, yb.data_ptr<float>(), L, K, absmax(fx, L * K));
            out[b].copy_(yb);
          }
        }
        break;
      default: break;
    }
  };
  if (x.scalar_type() == at::kFloat)
    run(x.data_ptr<float>(), out.data_ptr<float>());
  else
    run(x.data_ptr<double>(), out.data_ptr<double>());
  return out;
}

float static_activation_scale(const QuantSpec& spec, double amax_in) {
  const float amax = static_cast<float>(amax_in);
  if (amax == 0) return 1.0f;
  return spec.kind == QuantKind::fp8 ? amax / element_format(spec.element).max_finite : amax / 127.0f;
}

at::Tensor fake_quantize_static(const at::Tensor& x, const QuantSpec& spec, float scale) {
  QEVAL_CHECK(spec.kind == QuantKind::int8_absmax || spec.kind == QuantKind::fp8,
              "fake_quantize_static: expected int8_absmax or fp8, got {}", to_string(spec.kind));
  if (spec.kind == QuantKind::int8_absmax) {
    const at::Tensor s = at::scalar_tensor(scale, x.options());  // a tensor divisor: an IEEE division on every device
    return at::round(x / s).clamp_(-127, 127) * s;
  }
  if (!x.device().is_cpu()) return fake_quantize_static(x.cpu(), spec, scale).to(x.device());
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  const ElementFormat& f = element_format(spec.element);
  if (xc.scalar_type() == at::kFloat)
    scaled_chunks(xc.data_ptr<float>(), out.data_ptr<float>(), xc.numel(), scale, f);
  else
    scaled_chunks(xc.data_ptr<double>(), out.data_ptr<double>(), xc.numel(), static_cast<double>(scale), f);
  return out;
}

std::int64_t float_format_weight_bytes(const QuantSpec& spec, std::int64_t N, std::int64_t K) {
  const std::int64_t elements = (N * K * spec.bits() + 7) / 8;
  switch (spec.kind) {
    case QuantKind::fp8: return elements + (spec.granularity == Granularity::channel ? N : 1) * 4;
    case QuantKind::mx: return elements + N * ((K + spec.group_size - 1) / spec.group_size);
    case QuantKind::nvfp4: return elements + N * ((K + kNvfp4Block - 1) / kNvfp4Block) + 4;
    default: return 0;
  }
}

}  // namespace qeval
