// Checks and kernel choice for w4a16_gemm (kernels/cuda/w4a16_gemm.h).
#include <cstdint>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/w4a16_gemm.h"
#include "kernels/cuda/w4a16_launch.cuh"

namespace qeval::kernels::cuda {
namespace {

std::string shape(const W4A16Args& a) {
  return " (M " + std::to_string(a.m) + ", N " + std::to_string(a.n) + ", K " + std::to_string(a.k) + ", group " +
         std::to_string(a.group_size) + ")";
}

}  // namespace

void w4a16_gemm(const W4A16Args& args, W4A16Kernel kernel, Stream stream) {
  QEVAL_CUDA_EXPECT(args.m > 0 && args.n > 0 && args.k > 0 && args.group_size > 0,
                    "w4a16_gemm: sizes and group size must be positive" + shape(args));
  QEVAL_CUDA_EXPECT(args.x && args.qweight && args.scales && args.zeros && args.y,
                    "w4a16_gemm: x, qweight, scales, zeros and y are required" + shape(args));
  W4A16Args a = args;
  if (a.group_size > a.k) a.group_size = a.k;  // per channel however it is spelled
  const std::string reason = w4a16_tensor_core_unsupported_reason(a);
  if (kernel == W4A16Kernel::automatic) kernel = reason.empty() ? W4A16Kernel::tensor_core : W4A16Kernel::simple;
  if (kernel == W4A16Kernel::tensor_core) {
    QEVAL_CUDA_EXPECT(reason.empty(), reason);
    detail::launch_w4a16_tensor_core(a, stream);
  } else {
    detail::launch_w4a16_simple(a, stream);
  }
}

}  // namespace qeval::kernels::cuda
