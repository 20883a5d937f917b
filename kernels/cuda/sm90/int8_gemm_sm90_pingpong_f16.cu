// One CUTLASS kernel of the fused int8 GEMM (int8_gemm_sm90.cuh): 128×128×128 tiles, cluster 2×1, ping-pong, persistent, f16 output.
// One instantiation per file keeps each kernel's compile time and memory visible and lets the
// nine compile in parallel.
// griddepcontrol.wait compiled in, so the kernel may be launched with programmatic dependent
// launch after the quantiser. Only the persistent-scheduler kernels: CUTLASS 4.2's stream-K
// scheduler does not compile with it (is_last_tile binds a const member to a non-const
// reference), so the small-tile files leave it out and never launch with PDL.
#define CUTLASS_ENABLE_GDC_FOR_SM90 1
#include "kernels/cuda/sm90/int8_gemm_sm90.cuh"

namespace qeval::kernels::cuda::sm90::detail {

template std::size_t workspace_bytes_for<FloatType::f16, Tile::pingpong>(const Int8GemmArgs&, int);
template void run_for<FloatType::f16, Tile::pingpong>(const Int8GemmArgs&, int, void*, Stream, bool);

}  // namespace qeval::kernels::cuda::sm90::detail
