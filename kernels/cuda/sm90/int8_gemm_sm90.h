// Fused int8 GEMM + dequantising epilogue for Hopper (sm_90a), built on CUTLASS 3.x/4.x when the
// build finds CUTLASS (QEVAL_CUTLASS_DIR, cmake/cuda.cmake). Plain C++ header: the dispatcher
// (kernels/cuda/int8_linear.cu) calls these through a table, and only includes this header when
// QEVAL_WITH_CUTLASS is defined.
//
//   out[m, n] = ((float(Σ_k a[m, k] · b[n, k]) · a_row_scales[m]) · w_scales[n or 0]) + bias[n]
//
// each operation rounded to float32 on its own (__fmul_rn, __fadd_rn: no FMA contraction), then
// rounded to the output type (round to nearest even) — the order of the CPU reference
// (kernels/int8_gemm.cpp) and of the separate epilogue (kernels/cuda/int8_epilogue.h), so an f32
// output is bit-identical to the CPU for the same int8 inputs. An absent bias adds −0.0f, which
// leaves every float unchanged (x + (−0) = x, also for x = ±0).
//
// Limits (int8_gemm_sm90_unsupported_reason): compute capability 9.0 exactly (sm_90a code), K a
// multiple of 16 and N·sizeof(out) a multiple of 16 bytes (TMA strides), 16-byte aligned a, b,
// out; K ≤ kInt8GemmMaxK (exact int32 sums).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda::sm90 {

struct Int8GemmArgs {
  const std::int8_t* a = nullptr;      // [M, K] int8, row-major (quantised activations)
  const std::int8_t* b = nullptr;      // [N, K] int8, row-major (quantised weights)
  const float* a_row_scales = nullptr; // [M]: the scale of each row's group
  const float* w_scales = nullptr;     // [N] (w_per_channel) or [1]
  bool w_per_channel = true;
  const float* bias = nullptr;         // [N] or nullptr
  void* out = nullptr;                 // [M, N] of out_type
  FloatType out_type = FloatType::f16;
  std::int64_t m = 0, n = 0, k = 0;
};

// Tile configurations (each one CUTLASS kernel per output type; see int8_gemm_sm90.cuh):
//   large  128×256×128, cluster 2×1, warp-specialised cooperative, persistent: big layers
//   small  128×128×128, cluster 1×1, warp-specialised cooperative, stream-K scheduler: layers
//          whose 128×256 tiles would not fill the GPU; `splits` > 1 forces split-K over that many
//          K slices, 0 lets CUTLASS's heuristic choose (data-parallel or stream-K), 1 forces
//          data-parallel. int32 partial sums make every decomposition exact.
//   pingpong 128×128×128, cluster 2×1, warp-specialised ping-pong, persistent: each consumer
//          warpgroup owns alternate tiles, so one's epilogue overlaps the other's mainloop
enum class Tile { large, small, pingpong };

struct Config {
  Tile tile = Tile::large;
  int splits = 1;  // small only: 0 heuristic (stream-K allowed), 1 data-parallel, > 1 split-K
};

// Programmatic dependent launch (pdl): the GEMM is launched while the kernel before it on the
// stream (the quantiser) finishes, does its prologue, and waits (griddepcontrol.wait, compiled
// in with CUTLASS_ENABLE_GDC_FOR_SM90) before it reads any global memory. Only the persistent
// tiles, large and pingpong (the stream-K scheduler of CUTLASS 4.2 does not compile with it) and only workspace-free
// configurations (a workspace memset would come in between); otherwise pdl is ignored.
std::string to_string(const Config& c);

// Empty when the fused kernels can run these arguments on the current device, else why not.
std::string unsupported_reason(const Int8GemmArgs& args);

// Workspace bytes `run` needs for this configuration (stream-K / split-K partial sums).
std::size_t workspace_bytes(const Int8GemmArgs& args, const Config& config);

// Launches on `stream`; workspace: workspace_bytes(args, config) bytes of device memory (may be
// nullptr when that is 0). Throws CudaError if CUTLASS refuses the arguments.
void run(const Int8GemmArgs& args, const Config& config, void* workspace, Stream stream, bool pdl = false);

}  // namespace qeval::kernels::cuda::sm90
