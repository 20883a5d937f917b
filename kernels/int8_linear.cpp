// Dispatch for int8_linear (kernels/int8_linear.h).
#include "kernels/int8_linear.h"

#include <c10/util/Exception.h>

#include "kernels/int8_gemm.h"
#include "kernels/int8_quantize.h"
#ifdef QEVAL_TORCH_HAS_CUDA
#include "kernels/cuda/adapter_torch.h"
#endif

namespace qeval::kernels {
namespace {

// x̂ = q · s per group of rows, the codes and scales of kernels/int8_quantize.h.
at::Tensor quantize_dequantize_rows(const at::Tensor& y, std::int64_t rows_per_scale) {
  Int8Rows r = quantize_int8_rows(y, rows_per_scale);
  return r.q.to(at::kFloat) * scales_per_row(r, rows_per_scale).unsqueeze(1);
}

}  // namespace

at::Tensor int8_linear(const at::Tensor& x, std::int64_t rows_per_scale, const at::Tensor& w_q,
                       const at::Tensor& w_scales, const at::Tensor& bias, std::int64_t out_rows_per_scale) {
  TORCH_CHECK(x.dim() == 2 && w_q.dim() == 2 && x.size(1) == w_q.size(1), "int8_linear: expected x [M, K] and w_q [N, K], got ",
              x.sizes(), " and ", w_q.sizes());
  TORCH_CHECK(rows_per_scale > 0 && out_rows_per_scale >= 0, "int8_linear: rows per scale must be positive, got ",
              rows_per_scale, " and ", out_rows_per_scale);
  if (x.is_cuda()) {
#ifdef QEVAL_TORCH_HAS_CUDA
    return cuda::int8_linear_cuda(x, rows_per_scale, w_q, w_scales, bias, x.scalar_type(), out_rows_per_scale);
#else
    TORCH_CHECK(false, "int8_linear: this build has no CUDA kernels for LibTorch tensors (needs a CUDA LibTorch)");
#endif
  }
  TORCH_CHECK(x.is_cpu() && x.scalar_type() == at::kFloat, "int8_linear: on the CPU x must be float32, got ",
              x.scalar_type(), " on ", x.device());
  Int8Rows a = quantize_int8_rows(x, rows_per_scale);
  at::Tensor y = int8_gemm(a.q, w_q, scales_per_row(a, rows_per_scale), w_scales, bias);
  return out_rows_per_scale > 0 ? quantize_dequantize_rows(y, out_rows_per_scale) : y;
}

std::string int8_linear_path(const at::Device& device, std::int64_t m, std::int64_t n, std::int64_t k) {
  if (device.is_cuda()) {
#ifdef QEVAL_TORCH_HAS_CUDA
    return "cuda: " + cuda::int8_linear_cuda_path(m, n, k);
#else
    return "cuda: unavailable in this build";
#endif
  }
  return "cpu: int8_quantize + int8_gemm (" + to_string(int8_gemm_cpu_backend()) + ")";
}

}  // namespace qeval::kernels
