// Which x86 vector instruction sets this CPU runs, for the kernels that come in an AVX2 + FMA
// variant (8 float lanes) and an AVX-512 variant (16 lanes) of one source (kernels/cpu/simd_x86.h).
// The binary is built for any x86-64; a variant is called only where CPUID says it runs.
#pragma once

namespace qeval::kernels::cpu {

enum class CpuIsa { none, avx2, avx512 };
const char* cpu_isa_name(CpuIsa isa);

// Whether this CPU runs `isa`: avx2 needs AVX2 and FMA, avx512 those and AVX-512 F and DQ. none
// (the portable code) is never a variant to call.
bool cpu_runs(CpuIsa isa);

// The widest variant this CPU runs: avx512, avx2 or none.
CpuIsa widest_cpu_isa();

}  // namespace qeval::kernels::cpu
