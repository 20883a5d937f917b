// Launchers of the two W4A16 kernels (internal); w4a16_gemm.cu checks the arguments and picks one.
#pragma once

#include "kernels/cuda/device.h"
#include "kernels/cuda/w4a16_gemm.h"

namespace qeval::kernels::cuda::detail {

// Arguments already checked; group_size clamped to K.
void launch_w4a16_tensor_core(const W4A16Args& args, Stream stream);
void launch_w4a16_simple(const W4A16Args& args, Stream stream);

}  // namespace qeval::kernels::cuda::detail
