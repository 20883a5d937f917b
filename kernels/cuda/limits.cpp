// What each CUDA kernel accepts, decided on the host: plain C++, built with or without nvcc, so
// dispatch code and tests can ask before any device call.
#include <cstdint>
#include <string>

#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/int8_linear.h"
#include "kernels/cuda/w4a16_gemm.h"

namespace qeval::kernels::cuda {
namespace {

std::string shape(std::int64_t m, std::int64_t n, std::int64_t k) {
  return " (M " + std::to_string(m) + ", N " + std::to_string(n) + ", K " + std::to_string(k) + ")";
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

std::string int8_gemm_unsupported_reason(std::int64_t m, std::int64_t n, std::int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return "int8_gemm_s32: sizes must be positive" + shape(m, n, k);
  if (k % 4 != 0) return "int8_gemm_s32: cuBLASLt IMMA wants K a multiple of 4" + shape(m, n, k);
  if (n % 4 != 0)
    return "int8_gemm_s32: cuBLASLt IMMA wants N (the output's leading dimension) a multiple of 4" + shape(m, n, k);
  if (k > kInt8GemmMaxK)
    return "int8_gemm_s32: K above " + std::to_string(kInt8GemmMaxK) + " could overflow the int32 sum" +
           shape(m, n, k);
  return {};
}

std::string int8_linear_unsupported_reason(std::int64_t m, std::int64_t n, std::int64_t k) {
  std::string r = int8_gemm_unsupported_reason(m, n, k);
  const std::string from = "int8_gemm_s32";
  if (r.compare(0, from.size(), from) == 0) r.replace(0, from.size(), "int8_linear");
  return r;
}

std::string to_string(Int8LinearPath path) {
  return path == Int8LinearPath::cutlass_sm90 ? "cutlass sm90 fused" : "cublaslt + epilogue";
}

std::string to_string(W4A16Kernel kernel) {
  switch (kernel) {
    case W4A16Kernel::automatic: return "automatic";
    case W4A16Kernel::tensor_core: return "tensor_core";
    case W4A16Kernel::simple: return "simple";
  }
  return "unknown";
}

std::string w4a16_tensor_core_unsupported_reason(const W4A16Args& a) {
  const std::string where = shape(a.m, a.n, a.k) + " group " + std::to_string(a.group_size);
  const std::int64_t group = a.group_size < a.k ? a.group_size : a.k;
  if (a.k % 128 != 0) return "w4a16 tensor core: K must be a multiple of 128" + where;
  if (group % 128 != 0) return "w4a16 tensor core: the group size must be a multiple of 128 (or K)" + where;
  if (!aligned16(a.x) || !aligned16(a.qweight))
    return "w4a16 tensor core: x and qweight must be 16-byte aligned for 128-bit loads" + where;
  return {};
}

}  // namespace qeval::kernels::cuda
