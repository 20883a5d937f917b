// One CUTLASS kernel of the fused int8 GEMM (int8_gemm_sm90.cuh): 128×128×128 tiles, stream-K / split-K scheduler, bf16 output.
// One instantiation per file keeps each kernel's compile time and memory visible and lets the
// nine compile in parallel.
#include "kernels/cuda/sm90/int8_gemm_sm90.cuh"

namespace qeval::kernels::cuda::sm90::detail {

template std::size_t workspace_bytes_for<FloatType::bf16, Tile::small>(const Int8GemmArgs&, int);
template void run_for<FloatType::bf16, Tile::small>(const Int8GemmArgs&, int, void*, Stream, bool);

}  // namespace qeval::kernels::cuda::sm90::detail
