// fp32 GEMM for the full-precision linears: y = x Wᵀ + b in float32. LibTorch's CPU matmul goes
// to whatever BLAS is installed; Debian's OpenBLAS 0.3.21 does not know this machine's CPU
// generation and runs its AVX2 (Haswell) kernel at ~100 GFLOP/s on 2 cores, while oneDNN's
// brgemm uses AVX-512 at ~450 (bench/results/). So on the CPU the dispatch prefers oneDNN's
// matmul (primitives cached by shape, the weight read in place) whenever oneDNN's implementation
// is brgemm (AVX-512 and newer; its gemm:jit path on AVX2 CPUs splits the reduction across
// threads), and LibTorch's at::linear otherwise (other dtypes, devices, non-contiguous
// inputs, and whenever autograd wants gradients: oneDNN runs outside it, so training keeps
// LibTorch's differentiable op). Results depend on neither the batch size (callers run one sequence per call) nor the
// thread count (oneDNN's fp32 brgemm does not split the reduction; on the BLAS path, under
// set_inference_threads, each GEMM is cut into 8 single-threaded BLAS calls whose shapes depend
// only on the operands, kernels/compute_threads.h; tests/kernels check it).
// QEVAL_FP32_GEMM=aten|onednn in the environment forces a backend (profiling, comparisons).
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace qeval::kernels {

enum class Fp32GemmBackend { automatic, aten, onednn };

std::string to_string(Fp32GemmBackend backend);

// x [M, K] float32, w [N, K] float32, bias [N] float32 or undefined → [M, N] float32.
at::Tensor fp32_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                       Fp32GemmBackend backend = Fp32GemmBackend::automatic);

// The same for x [..., K] of any leading shape (as at::linear takes it): one GEMM over all rows.
at::Tensor fp32_linear_rows(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);

// Batched: a [batch, M, K] × b [batch, K, N] (any strides, e.g. a transposed view) times alpha →
// [batch, M, N] contiguous float32, one product per batch entry (so entries do not depend on the
// batch size). oneDNN under the same conditions as fp32_linear, else at::bmm.
at::Tensor fp32_bmm(const at::Tensor& a, const at::Tensor& b, double alpha = 1.0);

// What `automatic` resolves to for contiguous float32 CPU operands on this machine (QEVAL_FP32_GEMM
// honoured; an unknown value there is an error naming the valid ones).
Fp32GemmBackend fp32_gemm_cpu_backend();
// For records: "onednn (brg:avx512_core)" or "aten (LibTorch at::linear, BLAS)".
std::string fp32_gemm_description();

}  // namespace qeval::kernels
