// The statistics-only pass of fused_attention (kernels/cuda/fused_attention_stats.h) on tensor
// cores, for half and bfloat16 inputs (issue 50: statistics at the forward's speed). Same
// arguments, same definitions and the same per-query output [3, B, H, L]; the logits q·k come
// from 16×16×16 MMAs with float32 accumulation instead of float32 FMAs on the CUDA cores (the
// products of 16-bit inputs are exact in both; only the order of the float32 sums differs). Every
// step after the logits (scale, soft cap, mask, online max / ℓ / E / S, the tie rule) is the
// CUDA-core kernel's, in float32.
#pragma once

#include "kernels/cuda/fused_attention_stats.h"

namespace qeval::kernels::cuda {

// Runs the statistics pass and returns true when it serves `args`: args.tensor_cores, statistics
// only (out == nullptr), f16 or bf16, and a device of compute capability 8.0 or newer. Returns
// false, having launched nothing, otherwise. args are already validated.
bool attention_stats_on_tensor_cores(const FusedAttentionArgs& args, Stream stream);

}  // namespace qeval::kernels::cuda
