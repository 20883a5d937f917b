// Dequantising epilogue of the int8 GEMM on the GPU: int32 products → f32 / f16 / bf16 outputs,
// with the activation and weight scales, the bias and (for the coarse scheme) a per-tensor
// output quantise–dequantise. Plain C++ header.
//
//   out[m, n] = (float(acc[m, n]) · a_scales[m / a_rows_per_scale]) · w_scales[n or 0] + bias[n]
//
// in that order, each step rounded to float32 (no fused multiply-add), then rounded to the output
// type: the order kernels/int8_gemm.cpp applies on the CPU, so an fp32 output is bit-identical to
// the CPU path for the same int32 products. With output quantisation on, each group of
// out_rows_per_scale rows then becomes x̂ = clamp(rint(v / s), −127, 127) · s with
// s = max|v| / 127 over the group, where v is the value as stored in the output type (the
// fp16- or bf16-rounded value for those outputs): the reference quantiser applied to the tensor the next
// layer would otherwise receive.
#pragma once

#include <cstdint>

#include "kernels/cuda/device.h"

namespace qeval::kernels::cuda {

struct Int8EpilogueArgs {
  const std::int32_t* acc = nullptr;  // [M, N] int32 from int8_gemm_s32
  std::int64_t m = 0, n = 0;
  const float* a_scales = nullptr;    // [ceil(M / a_rows_per_scale)]
  std::int64_t a_rows_per_scale = 1;  // 1 per token, L per sequence of L tokens, ≥ M per tensor
  const float* w_scales = nullptr;    // [N] per output channel, or [1] per tensor
  bool w_per_channel = true;
  const float* bias = nullptr;        // [N] or nullptr
  void* out = nullptr;                // [M, N] of out_type; may not alias acc
  FloatType out_type = FloatType::f16;
  std::int64_t out_rows_per_scale = 0;  // 0: no output quantisation; else rows per output scale
  float* out_scales = nullptr;          // [ceil(M / out_rows_per_scale)]: receives the output scales
};

void int8_dequantize_epilogue(const Int8EpilogueArgs& args, Stream stream = nullptr);

// The output quantise–dequantise alone, in place on out [M, N] of out_type: what
// int8_dequantize_epilogue does after the dequantisation when out_rows_per_scale > 0 (the fused
// GEMM of kernels/cuda/int8_linear.h runs it after its own epilogue). out_scales
// [ceil(M / out_rows_per_scale)] receives the scales.
void int8_output_quantize_dequantize(void* out, FloatType out_type, std::int64_t m, std::int64_t n,
                                     std::int64_t out_rows_per_scale, float* out_scales, Stream stream = nullptr);

}  // namespace qeval::kernels::cuda
