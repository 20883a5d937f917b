// The whole int8 linear layer on the GPU in as few passes as the maths allows: absmax int8
// quantisation of the activations (one read of x), the s8·s8→s32 GEMM, and the dequantising
// epilogue applied to the accumulators. Plain C++ header (kernels/cuda/adapter_torch.h hands it
// tensors).
//
//   y[m, n] = ((float(Σ_k q_x[m, k] · w_q[n, k]) · a_scale[m / rows_per_scale]) · w_scales[n or 0])
//             + bias[n]
//
// q_x, a_scale the reference absmax quantisation of x (kernels/cuda/absmax_quantize.h), each
// operation rounded to float32 on its own, then rounded to the output type; with
// out_rows_per_scale > 0 the output is then quantised–dequantised per group of that many rows as
// kernels/cuda/int8_epilogue.h describes. An f32 output is bit-identical to the CPU reference for
// the same inputs; f16 / bf16 outputs are that f32 value rounded to nearest even.
//
// Two implementations, one result:
//   cutlass sm90 fused   CUTLASS wgmma GEMM with the epilogue in registers (kernels/cuda/sm90/);
//                        built when CMake finds CUTLASS, run on compute capability 9.0 only.
//   cublaslt + epilogue  cuBLASLt IMMA to an int32 buffer, then the separate epilogue kernel.
// Which one (and which CUTLASS tile configuration and split) runs is decided once per
// (device, M, N, K) by timing the candidates on scratch buffers, and cached (int8_linear_plan).
// QEVAL_INT8_LINEAR=cublaslt forces the fallback without a rebuild (=cutlass: CUTLASS only,
// =auto: the default); QEVAL_INT8_LINEAR_TUNE=0 replaces the timing by a fixed rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda {

enum class Int8LinearPath { cutlass_sm90, cublaslt_epilogue };

// The implementation chosen for one (device, M, N, K), and the scratch it needs.
struct Int8LinearPlan {
  Int8LinearPath path = Int8LinearPath::cublaslt_epilogue;
  int cutlass_tile = 0;    // sm90::Tile as int (0 large, 1 small, 2 pingpong) when path is cutlass_sm90
  int cutlass_splits = 1;  // sm90::Config::splits
  std::size_t cutlass_workspace_bytes = 0;
  std::string description;  // "cutlass sm90 fused (128x256x128, persistent)", "cublaslt + epilogue"
};

// Empty when int8_linear accepts the shape (K and N multiples of 4, K ≤ kInt8GemmMaxK), else why
// not; callers zero-pad K and N to multiples of 16 and 8 (padded terms are 0 · 0).
std::string int8_linear_unsupported_reason(std::int64_t m, std::int64_t n, std::int64_t k);

// The cached plan for this shape on the current device (timed on first use: allocates scratch
// buffers and synchronises the device once per shape). out_type and pointer alignment are
// checked again per call: a call the CUTLASS kernel cannot take runs the fallback.
const Int8LinearPlan& int8_linear_plan(std::int64_t m, std::int64_t n, std::int64_t k);

// Every implementation that can run this shape on the current device, whatever
// QEVAL_INT8_LINEAR says (CUTLASS configurations first, cuBLASLt + epilogue last): what
// int8_linear_plan chooses from, for tests (each must be exact) and benchmarks.
std::vector<Int8LinearPlan> int8_linear_candidates(std::int64_t m, std::int64_t n, std::int64_t k);

struct Int8LinearArgs {
  const void* x = nullptr;  // [M, K] of x_type, row-major contiguous, 16-byte aligned for speed
  FloatType x_type = FloatType::f16;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t rows_per_scale = 1;     // activation scale groups: 1 per token, L per sequence, M per tensor
  const std::int8_t* w_q = nullptr;    // [N, K] int8
  const float* w_scales = nullptr;     // [N] or [1]
  bool w_per_channel = true;
  const float* bias = nullptr;         // [N] or nullptr
  void* out = nullptr;                 // [M, N] of out_type
  FloatType out_type = FloatType::f16;
  std::int64_t out_rows_per_scale = 0;  // > 0: output quantise–dequantise per group of rows
  void* workspace = nullptr;            // int8_linear_workspace_bytes(...) bytes of device memory
  // Launch the fused GEMM with programmatic dependent launch after the quantiser (its prologue
  // overlaps the quantiser's tail; it waits for the quantiser's writes before reading). Off
  // everywhere with QEVAL_INT8_PDL=0.
  bool pdl = true;
};

// Scratch bytes int8_linear needs for these arguments (every field but workspace set): q_x,
// scales, per-row scales, output scales, the int32 accumulators (fallback only) and CUTLASS's
// stream-K partial sums. Decides the path exactly as int8_linear does.
std::size_t int8_linear_workspace_bytes(const Int8LinearArgs& args, const Int8LinearPlan& plan);

// Runs the plan's implementation on `stream` (the fallback if the plan's CUTLASS kernel cannot
// take these pointers or this output type). Returns the path that ran.
Int8LinearPath int8_linear(const Int8LinearArgs& args, const Int8LinearPlan& plan, Stream stream = nullptr);

std::string to_string(Int8LinearPath path);

// Whether this build has the CUTLASS kernels (QEVAL_WITH_CUTLASS), for records and tests.
bool int8_linear_cutlass_built() noexcept;

}  // namespace qeval::kernels::cuda
