// Host side of the fused sm90 int8 GEMM (kernels/cuda/sm90/int8_gemm_sm90.h): the limits and
// the table from (output type, tile) to the nine CUTLASS instantiations. No CUTLASS header here,
// so this file compiles in seconds.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/sm90/int8_gemm_sm90.h"

namespace qeval::kernels::cuda::sm90 {
namespace detail {

// Defined (explicitly instantiated) in int8_gemm_sm90_<tile>_<out>.cu.
template <FloatType kOut, Tile kTile>
std::size_t workspace_bytes_for(const Int8GemmArgs& a, int splits);
template <FloatType kOut, Tile kTile>
void run_for(const Int8GemmArgs& a, int splits, void* workspace, Stream stream, bool pdl);

}  // namespace detail

namespace {

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <Tile kTile>
std::size_t workspace_for_tile(const Int8GemmArgs& a, int splits) {
  switch (a.out_type) {
    case FloatType::f32: return detail::workspace_bytes_for<FloatType::f32, kTile>(a, splits);
    case FloatType::f16: return detail::workspace_bytes_for<FloatType::f16, kTile>(a, splits);
    case FloatType::bf16: return detail::workspace_bytes_for<FloatType::bf16, kTile>(a, splits);
  }
  return 0;
}

template <Tile kTile>
void run_tile(const Int8GemmArgs& a, int splits, void* workspace, Stream stream, bool pdl) {
  switch (a.out_type) {
    case FloatType::f32: detail::run_for<FloatType::f32, kTile>(a, splits, workspace, stream, pdl); break;
    case FloatType::f16: detail::run_for<FloatType::f16, kTile>(a, splits, workspace, stream, pdl); break;
    case FloatType::bf16: detail::run_for<FloatType::bf16, kTile>(a, splits, workspace, stream, pdl); break;
  }
}

}  // namespace

std::string to_string(const Config& c) {
  if (c.tile == Tile::large) return "128x256x128, persistent";
  if (c.tile == Tile::pingpong) return "128x128x128 ping-pong, persistent";
  if (c.splits == 0) return "128x128x128, stream-K heuristic";
  if (c.splits == 1) return "128x128x128, data-parallel";
  return "128x128x128, split-K " + std::to_string(c.splits);
}

std::string unsupported_reason(const Int8GemmArgs& a) {
  // Built only when something fails: this runs on every call.
  auto shape = [&a] {
    return " (M " + std::to_string(a.m) + ", N " + std::to_string(a.n) + ", K " + std::to_string(a.k) + ")";
  };
  if (a.m <= 0 || a.n <= 0 || a.k <= 0) return "int8 sm90 GEMM: sizes must be positive" + shape();
  if (a.k % 16 != 0) return "int8 sm90 GEMM: K must be a multiple of 16 (TMA row pitch)" + shape();
  if ((a.n * static_cast<std::int64_t>(size_of(a.out_type))) % 16 != 0)
    return std::string("int8 sm90 GEMM: N · sizeof(") + to_string(a.out_type) +
           ") must be a multiple of 16 bytes (TMA row pitch)" + shape();
  if (a.k > kInt8GemmMaxK) return "int8 sm90 GEMM: K could overflow the int32 sum" + shape();
  if (a.m > (std::int64_t{1} << 31) - 1 || a.n > (std::int64_t{1} << 31) - 1)
    return "int8 sm90 GEMM: M and N must fit in int" + shape();
  if (!aligned16(a.a) || !aligned16(a.b) || !aligned16(a.out))
    return "int8 sm90 GEMM: a, b and out must be 16-byte aligned (TMA)" + shape();
  return {};
}

std::size_t workspace_bytes(const Int8GemmArgs& a, const Config& c) {
  switch (c.tile) {
    case Tile::large: return workspace_for_tile<Tile::large>(a, c.splits);
    case Tile::small: return workspace_for_tile<Tile::small>(a, c.splits);
    case Tile::pingpong: return workspace_for_tile<Tile::pingpong>(a, c.splits);
  }
  return 0;
}

void run(const Int8GemmArgs& a, const Config& c, void* workspace, Stream stream, bool pdl) {
  const std::string reason = unsupported_reason(a);
  QEVAL_CUDA_EXPECT(reason.empty(), reason);
  QEVAL_CUDA_EXPECT(a.a_row_scales && a.w_scales, "int8 sm90 GEMM: a_row_scales and w_scales are required");
  switch (c.tile) {
    case Tile::large: run_tile<Tile::large>(a, c.splits, workspace, stream, pdl); break;
    case Tile::small: run_tile<Tile::small>(a, c.splits, workspace, stream, pdl); break;
    case Tile::pingpong: run_tile<Tile::pingpong>(a, c.splits, workspace, stream, pdl); break;
  }
}

}  // namespace qeval::kernels::cuda::sm90
