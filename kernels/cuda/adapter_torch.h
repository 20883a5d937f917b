// Tensor adapter: the CUDA kernels behind the same contracts as the CPU ops (kernels/int8_gemm.h,
// the 4-bit weight GEMM), taking at::Tensors on a CUDA device and running on the current stream.
// Defined only when LibTorch has CUDA (kernels/cuda/adapter_torch.cpp, built when cmake sets
// QEVAL_TORCH_HAS_CUDA); dispatch code calls it under `#ifdef QEVAL_TORCH_HAS_CUDA` in its .cpp.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <tuple>

namespace qeval::kernels::cuda {

// a [M, K] int8, b [N, K] int8 → [M, N] int32, exact. K or N off a multiple of 4 is zero-padded
// (padded terms are 0 · 0, so still exact).
at::Tensor int8_matmul_s32_cuda(const at::Tensor& a, const at::Tensor& b);

// kernels::int8_gemm on CUDA: (float(a · bᵀ) · a_scale[m]) · b_scale[n] + bias[n] as out_dtype
// (float, half or bfloat16); a_scale [M] or [1], b_scale [N] or [1], bias [N] float or undefined.
// out_rows_per_scale > 0 adds the per-tensor output quantise–dequantise (coarse), one scale per
// group of that many rows.
at::Tensor int8_gemm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                          const at::Tensor& b_scale, const at::Tensor& bias, at::ScalarType out_dtype = at::kFloat,
                          std::int64_t out_rows_per_scale = 0);

// x [M, K] float, half or bfloat16 → {q [M, K] int8, scales [ceil(M / rows_per_scale)] float}.
std::tuple<at::Tensor, at::Tensor> absmax_quantize_cuda(const at::Tensor& x, std::int64_t rows_per_scale);

// x [M, K] half, qweight [N, ceil(K/2)] uint8, scales and zeros [N, G] float, bias [N] float or
// undefined → [M, N] half (kernels/cuda/w4a16_gemm.h).
at::Tensor w4a16_gemm_cuda(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales,
                           const at::Tensor& zeros, std::int64_t group_size, const at::Tensor& bias);

// x [M, K] float, half or bfloat16 (CUDA) → y [M, N] of out_dtype (float, half or bfloat16).
// y = ((float(Σ_k q_x[m,k]·w_q[n,k]) · a_scale[m / rows_per_scale]) · w_scales[n or 0]) + bias[n],
// with q_x the absmax int8 quantisation of x, one scale per group of rows_per_scale consecutive rows
// (1: per token; L: per sequence of L tokens; M: whole tensor); each op rounded on its own in fp32.
// out_rows_per_scale > 0: the output is then quantised–dequantised (int8 absmax) per group of that many rows.
// The fastest exact implementation for the shape (fused CUTLASS when built and supported, else cuBLASLt +
// epilogue; kernels/cuda/int8_linear.h). K or N off a multiple of 4 is zero-padded.
at::Tensor int8_linear_cuda(const at::Tensor& x, std::int64_t rows_per_scale, const at::Tensor& w_q /*[N, K] int8*/,
                            const at::Tensor& w_scales /*[N] or [1] float*/, const at::Tensor& bias /*[N] float or undefined*/,
                            at::ScalarType out_dtype, std::int64_t out_rows_per_scale = 0);

// Which implementation int8_linear_cuda uses for this shape on the current device, in words for records
// ("cutlass sm90 fused (128x256x128, persistent)", "cublaslt + epilogue"). Times the candidates on
// first use of a shape (the same cached plan int8_linear_cuda then uses).
std::string int8_linear_cuda_path(std::int64_t m, std::int64_t n, std::int64_t k);

// 4-bit zero-point weights (CPU quantiser's packed layout, kernels/w4_gemm.h): x [M, K] half or bfloat16 → [M, N] x's dtype.
// Chooses the W4A16 kernel or dequantise + fp16/bf16 cuBLAS GEMM by shape; `chosen` (if non-null) receives which, in words.
// The dequantised weights are cached per (qweight, scales, zeros, dtype) while those tensors live unchanged, up to
// QEVAL_W4_DEQUANT_CACHE_MB (default: a quarter of the device's memory); beyond that each call dequantises into scratch.
at::Tensor w4_linear_cuda(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros,
                          std::int64_t group_size, const at::Tensor& bias, std::string* chosen = nullptr);

// Causal attention with the statistics of DESIGN.md §6 in the same pass (kernels/cuda/fused_attention_stats.h):
// q [B, H, L, hd], k and v [B, Hkv, L, hd] of one dtype (float, half or bfloat16) on one CUDA device, any strides
// (the last dimension is made contiguous) → out [B, L, H·hd] of that dtype (undefined when !with_output: the
// statistics only, v unread). softcap > 0: c·tanh(s / c) on the
// scaled logits; window 0: global. head_sums non-null: receives [B, H, 4] float64 on the device, the per-(b, h)
// sums {Σ_{i<T'} A_i1, Σ_{1≤i<reach} A_i1, Σ_{1≤i<reach} first-attn credit, Σ_i entropy} (0-based i, reach and
// T' = min(sink_T, reach) as the header defines, reach from stats_window). The [B, H, L, L] weights never exist in memory.
at::Tensor fused_attention_stats_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t window,
                                      double scale, double softcap, bool softmax_one, std::int64_t sink_T,
                                      std::int64_t stats_window, at::Tensor* head_sums, bool with_output = true);

// Empty when fused_attention_stats_cuda serves these operands, else why not, in words.
std::string fused_attention_stats_cuda_unsupported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// hidden [B, L, D] float, half or bfloat16 (CUDA), D ≤ kHiddenStatsMaxChannels → [B, 9] float64 on the device:
// the HiddenLayerStats fields of each sequence in order (stats/hidden_stats.h), from one read of hidden.
at::Tensor hidden_stats_cuda(const at::Tensor& hidden);

// Drops the cached dequantised 4-bit weights (and the references that keep their sources alive).
void w4_linear_cuda_clear_cache();

}  // namespace qeval::kernels::cuda
