#include "kernels/fp32_gemm.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/compute_threads.h"
#include "kernels/cpu/onednn_matmul.h"

namespace qeval::kernels {
namespace {

using dt = dnnl::memory::data_type;

// oneDNN's fp32 matmul implementation on this CPU ("none" if it has none), looked up once.
const std::string& onednn_fp32_impl() {
  static const std::string impl = [] {
    try {
      return cpu::onednn_matmul(dt::f32, dt::f32, 16, 64, 16, false)->impl;
    } catch (const dnnl::error&) {
      return std::string("none");
    }
  }();
  return impl;
}

// oneDNN always has a reference implementation ("ref:any"); only a JIT one is worth forcing.
bool onednn_fp32_jit() { return onednn_fp32_impl() != "none" && onednn_fp32_impl().rfind("ref", 0) != 0; }

// What `automatic` dispatches to: only oneDNN's brgemm (AVX-512 and newer), which never splits
// the reduction across threads. Its other JIT path, gemm:jit (what an AVX2 CPU gets), splits K
// when the output is small (M 3, K 4096, N 8 on an AVX2 EPYC: 1 and 2 threads differ in the
// last bit), so the evaluator's bits would depend on --threads; there LibTorch's BLAS is used.
bool onednn_fp32_automatic() { return onednn_fp32_impl().rfind("brg", 0) == 0; }

bool onednn_can_run(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  auto plain = [](const at::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(); };
  // oneDNN works on raw memory, outside autograd: training (gradients wanted) stays on at::linear.
  const bool wants_grad = at::GradMode::is_enabled() &&
                          (x.requires_grad() || w.requires_grad() || (bias.defined() && bias.requires_grad()));
  return !wants_grad && x.dim() == 2 && w.dim() == 2 && plain(x) && plain(w) && (!bias.defined() || plain(bias));
}

at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  const std::int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  if (M == 0 || N == 0 || K == 0) return at::linear(x, w, bias);
  at::Tensor y = at::empty({M, N}, x.options());
  cpu::run_onednn_matmul(*cpu::onednn_matmul(dt::f32, dt::f32, M, K, N, bias.defined()), x.data_ptr(), w.data_ptr(),
                         bias.defined() ? bias.data_ptr() : nullptr, y.data_ptr());
  return y;
}

// Under set_inference_threads (OpenBLAS on one thread): y = x wᵀ + b as kBlasPieces BLAS calls,
// each on a slice of w's rows (output columns), run over LibTorch's pool. The slices depend only on
// N, never on the thread count, so every thread count makes the same single-threaded BLAS calls
// and gets the same bits. Eight slices of a multiple of 8 columns keep 1, 2, 4 and 8 threads busy
// alike; x is packed once per slice (M·K against M·N·K/8 multiply-adds).
constexpr std::int64_t kBlasPieces = 8;

bool split_blas(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  return inference_threading() && onednn_can_run(x, w, bias) && x.size(0) > 0 && x.size(1) > 0 && w.size(0) > 0;
}

at::Tensor split_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  const std::int64_t M = x.size(0), N = w.size(0);
  const std::int64_t width = std::max<std::int64_t>(8, ((N + kBlasPieces - 1) / kBlasPieces + 7) / 8 * 8);
  const std::int64_t pieces = (N + width - 1) / width;
  at::Tensor y = at::empty({M, N}, x.options());  // [M, N]
  at::parallel_for(0, pieces, 1, [&](std::int64_t begin, std::int64_t end) {
    OneBlasThreadHere one_blas_thread;
    for (std::int64_t p = begin; p < end; ++p) {
      const std::int64_t n0 = p * width, n = std::min(width, N - n0);
      at::Tensor out = y.narrow(1, n0, n);  // [M, n], row stride N: BLAS writes it in place
      at::Tensor wt = w.narrow(0, n0, n).t();
      if (bias.defined())
        at::addmm_out(out, bias.narrow(0, n0, n), x, wt);
      else
        at::mm_out(out, x, wt);
    }
  });
  return y;
}

}  // namespace

std::string to_string(Fp32GemmBackend backend) {
  switch (backend) {
    case Fp32GemmBackend::automatic: return "automatic";
    case Fp32GemmBackend::aten: return "aten";
    case Fp32GemmBackend::onednn: return "onednn";
  }
  return "?";
}

Fp32GemmBackend fp32_gemm_cpu_backend() {
  static const Fp32GemmBackend chosen = [] {
    const char* env = std::getenv("QEVAL_FP32_GEMM");
    const std::string forced = env ? env : "";
    if (forced == "aten") return Fp32GemmBackend::aten;
    if (forced == "onednn") {
      TORCH_CHECK(onednn_fp32_jit(), "QEVAL_FP32_GEMM=onednn: oneDNN has no JIT fp32 matmul for this CPU");
      return Fp32GemmBackend::onednn;
    }
    TORCH_CHECK(forced.empty(), "QEVAL_FP32_GEMM=", forced, ": expected aten or onednn (or unset)");
    return onednn_fp32_automatic() ? Fp32GemmBackend::onednn : Fp32GemmBackend::aten;
  }();
  return chosen;
}

std::string fp32_gemm_description() {
  if (fp32_gemm_cpu_backend() == Fp32GemmBackend::onednn)
    return "onednn (" + onednn_fp32_impl() + ")";
  return "aten (LibTorch at::linear, BLAS)";
}

at::Tensor fp32_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, Fp32GemmBackend backend) {
  if (backend == Fp32GemmBackend::automatic)
    backend = onednn_can_run(x, w, bias) ? fp32_gemm_cpu_backend() : Fp32GemmBackend::aten;
  if (backend == Fp32GemmBackend::onednn) {
    TORCH_CHECK(onednn_can_run(x, w, bias), "fp32_linear: oneDNN needs contiguous 2-D float32 CPU operands");
    return onednn_linear(x, w, bias);
  }
  if (split_blas(x, w, bias)) return split_linear(x, w, bias);
  return bias.defined() ? at::linear(x, w, bias) : at::linear(x, w);
}

at::Tensor fp32_bmm(const at::Tensor& a, const at::Tensor& b, double alpha) {
  auto plain = [](const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 3 && t.stride(2) >= 1 && t.stride(1) >= 1;
  };
  const bool wants_grad = at::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad());
  if (!wants_grad && plain(a) && plain(b) && fp32_gemm_cpu_backend() != Fp32GemmBackend::onednn &&
      inference_threading() && a.numel() > 0 && b.numel() > 0 && a.size(0) == b.size(0)) {
    // One single-threaded BLAS call per batch entry over LibTorch's pool (see split_linear).
    at::Tensor y = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());  // [batch, M, N]
    at::parallel_for(0, a.size(0), 1, [&](std::int64_t begin, std::int64_t end) {
      OneBlasThreadHere one_blas_thread;
      for (std::int64_t i = begin; i < end; ++i) {
        at::Tensor out = y.select(0, i);
        at::mm_out(out, a.select(0, i), b.select(0, i));
        if (alpha != 1.0) out.mul_(alpha);
      }
    });
    return y;
  }
  if (wants_grad || !plain(a) || !plain(b) || fp32_gemm_cpu_backend() != Fp32GemmBackend::onednn || a.numel() == 0 ||
      b.numel() == 0) {
    at::Tensor y = at::bmm(a, b);
    return alpha == 1.0 ? y : y * alpha;
  }
  const std::int64_t batch = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  TORCH_CHECK(b.size(0) == batch && b.size(1) == K, "fp32_bmm: [", batch, ", ", M, ", ", K, "] x ", b.sizes(), " do not fit");
  // oneDNN wants a non-zero batch stride even for one entry.
  auto strides = [](const at::Tensor& t) {
    return std::array<std::int64_t, 3>{t.size(0) == 1 ? t.size(1) * t.size(2) : t.stride(0), t.stride(1), t.stride(2)};
  };
  at::Tensor y = at::empty({batch, M, N}, a.options());
  const auto p = cpu::onednn_batched_matmul(batch, M, K, N, strides(a), strides(b), static_cast<float>(alpha));
  cpu::run_onednn_matmul(*p, a.data_ptr(), b.data_ptr(), nullptr, y.data_ptr());
  return y;
}

at::Tensor fp32_linear_rows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  if (x.dim() == 2) return fp32_linear(x.contiguous(), w, bias);
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape.back() = w.size(0);
  return fp32_linear(x.reshape({-1, x.size(-1)}).contiguous(), w, bias).view(shape);
}

}  // namespace qeval::kernels
