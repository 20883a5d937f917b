// The AVX2 + FMA and AVX-512 variants of kernels/cpu/vocab_rows_cpu.h: one source
// (kernels/cpu/vocab_rows_kernel.inc) included once per variant.
#include <limits>

#include <c10/util/Exception.h>

#include "kernels/cpu/simd_x86.h"
#include "kernels/cpu/vocab_rows_cpu.h"

namespace qeval::kernels::cpu {

#ifdef QEVAL_HAS_X86_VARIANTS
namespace {

namespace avx2 {
using S = simd::Avx2Ops;
#define QEVAL_SIMD QEVAL_AVX2_FMA
#include "kernels/cpu/vocab_rows_kernel.inc"
#undef QEVAL_SIMD
}  // namespace avx2

namespace avx512 {
using S = simd::Avx512Ops;
#define QEVAL_SIMD QEVAL_AVX512
#include "kernels/cpu/vocab_rows_kernel.inc"
#undef QEVAL_SIMD
}  // namespace avx512

}  // namespace
#endif

VocabRowKernels vocab_row_kernels(CpuIsa isa) {
  if (isa == CpuIsa::none) return vocab_row_reference();
  TORCH_CHECK(cpu_runs(isa), "vocab_row_kernels: this CPU does not run the ", cpu_isa_name(isa), " variant");
#ifdef QEVAL_HAS_X86_VARIANTS
  if (isa == CpuIsa::avx512) return {avx512::max_first, avx512::exp_sum, avx512::weighted_difference_sum};
  return {avx2::max_first, avx2::exp_sum, avx2::weighted_difference_sum};
#else
  return vocab_row_reference();
#endif
}

}  // namespace qeval::kernels::cpu
