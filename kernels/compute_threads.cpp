#include "kernels/compute_threads.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

namespace qeval::kernels {
namespace {

// OpenBLAS's entry points, looked up in the process rather than linked: LibTorch reaches BLAS
// through libblas.so.3, which Debian's alternatives may point at OpenBLAS, BLIS or the reference
// BLAS, so the symbols exist only on some machines.
template <typename Fn>
Fn openblas_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

void set_compute_threads(int threads) {
  at::set_num_threads(threads);
  if (auto set = openblas_symbol<void (*)(int)>("openblas_set_num_threads")) set(threads);
}

std::optional<int> blas_threads() {
  if (auto get = openblas_symbol<int (*)()>("openblas_get_num_threads")) return get();
  return std::nullopt;
}

}  // namespace qeval::kernels
