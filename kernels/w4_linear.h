// 4-bit weight linear on any device: y = x · Ŵᵀ + bias with Ŵ the packed zero-point weight of
// kernels/w4_gemm.h (layouts there). On the CPU it is kernels/w4_gemm (float32). On a GPU, x in
// float16 or bfloat16: the CUDA dispatch (kernels/cuda/adapter_torch.h) picks the W4A16 kernel
// or dequantise + cuBLAS GEMM by shape and says which in `chosen`. float32 on a GPU has no
// packed kernel here: callers run the dequantised weight through a float GEMM instead.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace qeval::kernels {

// x [M, K] → [M, N] in x's dtype. bias [N] float32 or undefined.
at::Tensor w4_linear(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros,
                     std::int64_t group_size, const at::Tensor& bias, std::string* chosen = nullptr);

// Whether w4_linear takes x of this device and dtype.
bool w4_linear_supports(const at::Device& device, at::ScalarType dtype);

}  // namespace qeval::kernels
