// oneDNN matmul primitives, built once per shape and data types and cached: building one costs
// far more than a small GEMM. Shared by the int8 and fp32 GEMMs. The operand b is handed over
// as a [K, N] matrix in `ba` order, i.e. the [N, K] nn.Linear weight as stored, so no copy is
// made. oneDNN picks its fastest implementation for the CPU (brgemm AVX-512, AMX, ...) and runs
// on the OpenMP threads LibTorch sets (at::set_num_threads).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace qeval::kernels::cpu {

dnnl::engine& onednn_engine();

struct OnednnMatmul {
  dnnl::matmul matmul;
  dnnl::memory::desc src, weights, bias, dst;  // bias is empty when the primitive has none
  std::string impl;  // oneDNN's name for the implementation it chose ("brg:avx512_core", ...)
};

// a [M, K] of `src_type` × b [N, K] of `weights_type` (+ bias [N] f32 when `with_bias`) → [M, N] f32.
// Shared so a primitive stays alive for a caller even if another thread clears the cache.
std::shared_ptr<const OnednnMatmul> onednn_matmul(dnnl::memory::data_type src_type, dnnl::memory::data_type weights_type,
                                                  std::int64_t M, std::int64_t K, std::int64_t N, bool with_bias);

// Batched, with any strides (in elements): a [batch, M, K], b [batch, K, N], f32, dst [batch, M, N]
// contiguous f32, every product multiplied by `alpha` (oneDNN output scale). Cached like the above.
std::shared_ptr<const OnednnMatmul> onednn_batched_matmul(std::int64_t batch, std::int64_t M, std::int64_t K,
                                                          std::int64_t N, const std::array<std::int64_t, 3>& a_strides,
                                                          const std::array<std::int64_t, 3>& b_strides, float alpha);

// Runs `p` on raw pointers (contiguous row-major operands as described above); waits for it.
void run_onednn_matmul(const OnednnMatmul& p, const void* a, const void* b, const void* bias, void* dst);

}  // namespace qeval::kernels::cpu
