// Dispatch for w4_linear (kernels/w4_linear.h).
#include "kernels/w4_linear.h"

#include <c10/util/Exception.h>

#include "kernels/w4_gemm.h"
#ifdef QEVAL_TORCH_HAS_CUDA
#include "kernels/cuda/adapter_torch.h"
#endif

namespace qeval::kernels {

bool w4_linear_supports(const at::Device& device, at::ScalarType dtype) {
  if (device.is_cpu()) return dtype == at::kFloat;
#ifdef QEVAL_TORCH_HAS_CUDA
  return device.is_cuda() && (dtype == at::kHalf || dtype == at::kBFloat16);
#else
  return false;
#endif
}

at::Tensor w4_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros,
                     std::int64_t group_size, const at::Tensor& bias, std::string* chosen) {
  TORCH_CHECK(w4_linear_supports(x.device(), x.scalar_type()), "w4_linear: no 4-bit kernel for ", x.scalar_type(),
              " inputs on ", x.device(), " in this build");
  if (x.is_cuda()) {
#ifdef QEVAL_TORCH_HAS_CUDA
    return cuda::w4_linear_cuda(x, qweight, scales, zeros, group_size, bias, chosen);
#endif
  }
  const W4GemmBackend backend = w4_gemm_backend_for(x.size(0), x.size(1), qweight.size(0));
  if (chosen) *chosen = "cpu: w4_gemm (" + to_string(backend) + ")";
  return w4_gemm(x, qweight, scales, zeros, group_size, bias, backend);
}

}  // namespace qeval::kernels
