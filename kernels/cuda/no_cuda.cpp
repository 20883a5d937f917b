// The CUDA entry points in a build without nvcc (QEVAL_WITH_CUDA=OFF, or auto with no toolkit):
// the probe reports no device and every device operation throws, so CPU code and the GPU tests
// build and run unchanged everywhere, and the tests report skipped. Compiled instead of the .cu
// files, never with them (cmake/cuda.cmake).
#include <string>

#include "kernels/cuda/absmax_quantize.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/fused_attention_stats.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/int8_epilogue.h"
#include "kernels/cuda/int8_linear.h"
#include "kernels/cuda/w4_dequantize.h"
#include "kernels/cuda/w4a16_gemm.h"

namespace qeval::kernels::cuda {
namespace {

[[noreturn]] void unavailable(const char* what) {
  throw CudaError(std::string(what) + ": qeval was built without CUDA kernels (no nvcc at configure time, or "
                                      "QEVAL_WITH_CUDA=OFF)");
}

}  // namespace

bool kernels_built() noexcept { return false; }
int device_count() noexcept { return 0; }
std::string no_device_reason() { return "qeval was built without CUDA kernels"; }
std::string device_description(int) { unavailable("device_description"); }
std::string cuda_versions() { unavailable("cuda_versions"); }

void* malloc_device(std::size_t) { unavailable("malloc_device"); }
void free_device(void*) noexcept {}
void copy_to_device(void*, const void*, std::size_t) { unavailable("copy_to_device"); }
void copy_to_host(void*, const void*, std::size_t) { unavailable("copy_to_host"); }
void copy_on_device(void*, const void*, std::size_t, Stream) { unavailable("copy_on_device"); }
void fill_bytes(void*, int, std::size_t, Stream) { unavailable("fill_bytes"); }
void synchronize() { unavailable("synchronize"); }
std::pair<std::size_t, std::size_t> memory_info(int) { unavailable("memory_info"); }
std::vector<float> time_runs_ms(const std::function<void(int)>&, int, int, Stream) { unavailable("time_runs_ms"); }

void int8_gemm_s32(const std::int8_t*, const std::int8_t*, std::int32_t*, std::int64_t, std::int64_t, std::int64_t,
                   Stream) {
  unavailable("int8_gemm_s32");
}
void fp16_gemm(const void*, const void*, void*, std::int64_t, std::int64_t, std::int64_t, Stream) {
  unavailable("fp16_gemm");
}
void half_gemm(const void*, const void*, void*, std::int64_t, std::int64_t, std::int64_t, FloatType, Stream) {
  unavailable("half_gemm");
}
std::size_t cublaslt_plans_cached() { return 0; }

void absmax_quantize_int8(const void*, FloatType, std::int64_t, std::int64_t, std::int64_t, std::int8_t*, float*,
                          Stream) {
  unavailable("absmax_quantize_int8");
}
void set_quantize_rows_kernel(QuantizeRowsKernel) {}
bool absmax_quantize_rows_f16_config(const void*, std::int64_t, std::int64_t, int, int, std::int8_t*, float*, Stream) {
  unavailable("absmax_quantize_rows_f16_config");
  return false;
}
void absmax_quantize_int8_rows(const void*, FloatType, std::int64_t, std::int64_t, std::int64_t, std::int8_t*, float*,
                               float*, Stream) {
  unavailable("absmax_quantize_int8_rows");
}
void int8_dequantize_epilogue(const Int8EpilogueArgs&, Stream) { unavailable("int8_dequantize_epilogue"); }
void int8_output_quantize_dequantize(void*, FloatType, std::int64_t, std::int64_t, std::int64_t, float*, Stream) {
  unavailable("int8_output_quantize_dequantize");
}
std::vector<Int8LinearPlan> int8_linear_candidates(std::int64_t, std::int64_t, std::int64_t) {
  unavailable("int8_linear_candidates");
}
const Int8LinearPlan& int8_linear_plan(std::int64_t, std::int64_t, std::int64_t) { unavailable("int8_linear_plan"); }
std::size_t int8_linear_workspace_bytes(const Int8LinearArgs&, const Int8LinearPlan&) {
  unavailable("int8_linear_workspace_bytes");
}
Int8LinearPath int8_linear(const Int8LinearArgs&, const Int8LinearPlan&, Stream) { unavailable("int8_linear"); }
bool int8_linear_cutlass_built() noexcept { return false; }
void w4a16_gemm(const W4A16Args&, W4A16Kernel, Stream) { unavailable("w4a16_gemm"); }
const char* fused_attention_unsupported_reason(const FusedAttentionArgs&) {
  return "qeval was built without CUDA kernels";
}
void fused_attention(const FusedAttentionArgs&, Stream) { unavailable("fused_attention"); }
void hidden_stats(const void*, FloatType, std::int64_t, std::int64_t, std::int64_t, double*, double*, Stream) {
  unavailable("hidden_stats");
}
void w4_dequantize(const std::uint8_t*, const float*, const float*, std::int64_t, std::int64_t, std::int64_t, void*,
                   FloatType, Stream) {
  unavailable("w4_dequantize");
}

}  // namespace qeval::kernels::cuda
