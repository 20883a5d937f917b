#include "kernels/cpu/cpu_isa.h"

namespace qeval::kernels::cpu {

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::avx512: return "avx512";
    case CpuIsa::none: break;
  }
  return "none";
}

bool cpu_runs(CpuIsa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return isa == CpuIsa::avx2 ? avx2 : isa == CpuIsa::avx512 ? avx512 : false;
#else
  (void)isa;
  return false;
#endif
}

CpuIsa widest_cpu_isa() {
  if (cpu_runs(CpuIsa::avx512)) return CpuIsa::avx512;
  return cpu_runs(CpuIsa::avx2) ? CpuIsa::avx2 : CpuIsa::none;
}

}  // namespace qeval::kernels::cpu
