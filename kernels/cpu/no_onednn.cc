// Stand-ins for the oneDNN backends in a build without oneDNN (QEVAL_WITH_ONEDNN=OFF: the CUDA
// LibTorch build, whose wheel carries oneDNN 3 headers that do not match Debian's oneDNN 2). The
// dispatch then never chooses oneDNN: its fp32 implementation reads as "none" and its int8 path
// as neither JIT nor exact, so the CPU runs LibTorch's fp32 GEMM and the exact float_exact int8
// GEMM. (A .cc file: the library's *.cpp glob leaves it to CMakeLists.txt to add.)
#include <c10/util/Exception.h>

#include "kernels/cpu/int8_gemm_cpu.h"
#include "kernels/cpu/onednn_matmul.h"

namespace qeval::kernels::cpu {
namespace {

[[noreturn]] void no_onednn(const char* what) {
  throw dnnl::error(dnnl_unimplemented, (std::string(what) + ": this qeval was built without oneDNN").c_str());
}

}  // namespace

dnnl::engine& onednn_engine() { no_onednn("onednn_engine"); }

std::shared_ptr<const OnednnMatmul> onednn_matmul(dnnl::memory::data_type, dnnl::memory::data_type, std::int64_t,
                                                  std::int64_t, std::int64_t, bool) {
  no_onednn("onednn_matmul");
}

std::shared_ptr<const OnednnMatmul> onednn_batched_matmul(std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                                          const std::array<std::int64_t, 3>&,
                                                          const std::array<std::int64_t, 3>&, float) {
  no_onednn("onednn_batched_matmul");
}

void run_onednn_matmul(const OnednnMatmul&, const void*, const void*, const void*, void*) {
  no_onednn("run_onednn_matmul");
}

at::Tensor int8_matmul_acc_onednn(const at::Tensor&, const at::Tensor&) {
  TORCH_CHECK(false, "int8_matmul_acc_onednn: this qeval was built without oneDNN");
}
std::string onednn_int8_impl(std::int64_t, std::int64_t, std::int64_t) { return "none"; }
bool onednn_int8_jit() { return false; }
bool onednn_int8_exact() { return false; }

}  // namespace qeval::kernels::cpu
