#include "kernels/compute_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <thread>

namespace qeval::kernels {
namespace {

std::atomic<bool> g_inference{false};

// BLAS entry points, looked up in the process rather than linked: Debian's LibTorch reaches BLAS
// through libblas.so.3, which Debian's alternatives may point at OpenBLAS, BLIS or the reference
// BLAS; PyPI's wheel carries MKL inside libtorch_cpu.so. Each symbol exists only on some machines.
template <typename Fn>
Fn blas_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

void set_blas_threads(int threads) {
  if (auto set = blas_symbol<void (*)(int)>("openblas_set_num_threads")) set(threads);
}

using MklSetLocal = int (*)(int);  // returns the previous per-thread count (0: none was set)

// MKL's C entry point. Not the lower-case `mkl_set_num_threads_local` the wheel also exports: that
// one is the Fortran interface (it reads its argument through a pointer; called with an int it
// crashed every CPU evaluation on the GPU machine).
MklSetLocal mkl_set_num_threads_local_fn() {
  static const MklSetLocal fn = blas_symbol<MklSetLocal>("MKL_Set_Num_Threads_Local");
  return fn;
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void set_compute_threads(int threads) {
  g_inference = false;
  at::set_num_threads(threads);
  set_blas_threads(threads);
}

void set_inference_threads(int threads) {
  at::set_num_threads(threads);
  set_blas_threads(1);
  g_inference = true;
}

bool inference_threading() { return g_inference; }

OneBlasThreadHere::OneBlasThreadHere() {
  if (MklSetLocal set = mkl_set_num_threads_local_fn()) previous_ = set(1);
}

OneBlasThreadHere::~OneBlasThreadHere() {
  if (previous_ >= 0) mkl_set_num_threads_local_fn()(previous_);
}

std::optional<int> blas_threads() {
  if (auto get = blas_symbol<int (*)()>("openblas_get_num_threads")) return get();
  return std::nullopt;
}

}  // namespace qeval::kernels
