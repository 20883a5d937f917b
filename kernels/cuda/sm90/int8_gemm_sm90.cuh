// The CUTLASS kernels behind kernels/cuda/sm90/int8_gemm_sm90.h (internal; needs CUTLASS and
// nvcc with -gencode=arch=compute_90a,code=sm_90a). Each int8_gemm_sm90_<tile>_<out>.cu
// instantiates one (output type, tile) pair, so the nine CUTLASS kernels compile in parallel and
// each one's compile time shows on its own.
//
// Why CUTLASS and not cuBLASLt: cuBLASLt's int8 IMMA kernels take per-tensor alpha (or, for
// 8-bit float types only, per-row/column scale modes) and compute the epilogue with FMAs; the
// exact per-token × per-channel epilogue `((float(acc) · a_m) · w_n) + b_n` with each step
// rounded on its own cannot be expressed, so the int32 accumulators had to go through device
// memory (4 bytes written and read per output) before a separate epilogue kernel. Here the
// epilogue is a CUTLASS epilogue visitor tree (EVT) applied to the accumulators in registers:
//
//   AddRn<out>( MulRn( MulRn(float(acc), a_row_scales[m]), w_scales[n or 0] ), bias[n] )
//
// MulRn / AddRn call __fmul_rn / __fadd_rn, which nvcc never fuses into an FMA, then the final
// NumericArrayConverter rounds to nearest even (cvt.rn) into f16 / bf16; int32 → float is a
// static_cast (cvt.rn.f32.s32), like the CPU's.
//
// Mainloop: wgmma s8·s8→s32 (the only operand layout Hopper's 8-bit wgmma takes is K-major for
// both A and B, which is exactly nn.Linear's x [M, K] and w [N, K]), TMA loads into a
// multi-stage shared-memory pipeline, a producer warp and two consumer warpgroups
// (warp-specialised "cooperative": both warpgroups share one output tile; "ping-pong": each takes
// its own, alternately).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/sm90/int8_gemm_sm90.h"

namespace qeval::kernels::cuda::sm90::detail {

// Element-wise a · b and a + b rounded on their own (never contracted into an FMA).
template <class T>
struct MulRn;
template <>
struct MulRn<float> {
  CUTLASS_DEVICE float operator()(float a, float b) const { return __fmul_rn(a, b); }
};
template <int N>
struct MulRn<cutlass::Array<float, N>> {
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& a,
                                                     cutlass::Array<float, N> const& b) const {
    cutlass::Array<float, N> r;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) r[i] = __fmul_rn(a[i], b[i]);
    return r;
  }
};

template <class T>
struct AddRn;
template <>
struct AddRn<float> {
  CUTLASS_DEVICE float operator()(float a, float b) const { return __fadd_rn(a, b); }
};
template <int N>
struct AddRn<cutlass::Array<float, N>> {
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& a,
                                                     cutlass::Array<float, N> const& b) const {
    cutlass::Array<float, N> r;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) r[i] = __fadd_rn(a[i], b[i]);
    return r;
  }
};

template <FloatType kOut>
struct OutElement;
template <>
struct OutElement<FloatType::f32> {
  using type = float;
};
template <>
struct OutElement<FloatType::f16> {
  using type = cutlass::half_t;
};
template <>
struct OutElement<FloatType::bf16> {
  using type = cutlass::bfloat16_t;
};

template <Tile kTile>
struct TileConfig;
template <>
struct TileConfig<Tile::large> {
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_128>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using Scheduler = cutlass::gemm::PersistentScheduler;
  using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
template <>
struct TileConfig<Tile::small> {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using Scheduler = cutlass::gemm::StreamKScheduler;
  using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
// Ping-pong: the two consumer warpgroups take alternate output tiles, so one runs its epilogue
// (the scales, the bias, the store) while the other runs its mainloop: the epilogue hides behind
// tensor-core work instead of following it. The configuration vLLM uses for its int8 scaled_mm
// (the same per-token × per-channel epilogue) on sm90 above M = 128.
template <>
struct TileConfig<Tile::pingpong> {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;
  using Scheduler = cutlass::gemm::PersistentScheduler;
  using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
};

template <FloatType kOut, Tile kTile>
struct Int8Gemm {
  using ElementD = typename OutElement<kOut>::type;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  using TileShape = typename TileConfig<kTile>::TileShape;
  using ClusterShape = typename TileConfig<kTile>::ClusterShape;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  // Per-row activation scales [M], per-channel-or-tensor weight scales, bias [N] (nullptr → −0).
  using ScaleA = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float, float,
                                                             cute::Stride<cute::_1, cute::_0, std::int64_t>>;
  using ScaleW = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, float,
                                                             cute::Stride<cute::_0, bool, std::int64_t>>;
  using Bias = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, float,
                                                           cute::Stride<cute::_0, cute::_1, std::int64_t>>;
  using AccTimesA = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<MulRn, float, float, kRound>, cutlass::epilogue::fusion::Sm90AccFetch,
      ScaleA>;
  using TimesW = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<MulRn, float, float, kRound>, AccTimesA, ScaleW>;
  using Epilogue = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<AddRn, ElementD, float, kRound>, TimesW, Bias>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, std::int32_t, float, void, LayoutD, kAlignD, ElementD, LayoutD,
      kAlignD, typename TileConfig<kTile>::EpilogueSchedule, Epilogue>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, std::int8_t, cutlass::layout::RowMajor, 16, std::int8_t,
      cutlass::layout::ColumnMajor, 16, std::int32_t, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename TileConfig<kTile>::MainloopSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, typename TileConfig<kTile>::Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

inline int sm_count(int device) {
  static int cached[64] = {};
  if (device < 0 || device >= 64) return 0;
  if (cached[device] == 0) {
    int n = 0;
    QEVAL_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    cached[device] = n;
  }
  return cached[device];
}

template <FloatType kOut, Tile kTile>
typename Int8Gemm<kOut, kTile>::Gemm::Arguments make_arguments(const Int8GemmArgs& a, int splits) {
  using G = Int8Gemm<kOut, kTile>;
  using Gemm = typename G::Gemm;
  using Kernel = typename G::Kernel;
  const int M = static_cast<int>(a.m), N = static_cast<int>(a.n), K = static_cast<int>(a.k);
  auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, cute::make_shape(M, K, 1));
  auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(N, K, 1));
  auto stride_c = cutlass::make_cute_packed_stride(typename Kernel::StrideC{}, cute::make_shape(M, N, 1));
  auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(M, N, 1));

  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {M, N, K, 1};
  args.mainloop.ptr_A = a.a;
  args.mainloop.dA = stride_a;
  args.mainloop.ptr_B = a.b;
  args.mainloop.dB = stride_b;
  // The EVT's arguments nest like the tree: {children..., node}.
  args.epilogue.thread = {
      {
          {
              {},                                                              // float(acc)
              {a.a_row_scales, 0.0f, {cute::_1{}, cute::_0{}, std::int64_t{0}}},  // · a_row_scales[m]
              {}                                                               // MulRn
          },
          {a.w_scales, 0.0f, {cute::_0{}, a.w_per_channel, std::int64_t{0}}},  // · w_scales[n or 0]
          {}                                                                   // MulRn
      },
      {a.bias, -0.0f, {cute::_0{}, cute::_1{}, std::int64_t{0}}},  // + bias[n] (nullptr: + −0)
      {}                                                           // AddRn, then round to ElementD
  };
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = stride_c;
  args.epilogue.ptr_D = static_cast<typename G::ElementD*>(a.out);
  args.epilogue.dD = stride_d;
  int device = 0;
  QEVAL_CUDA_CHECK(cudaGetDevice(&device));
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count(device);
  if constexpr (kTile == Tile::small) {
    using Mode = cutlass::gemm::kernel::detail::DecompositionMode;
    args.scheduler.splits = splits > 1 ? splits : 1;
    args.scheduler.decomposition_mode =
        splits == 0 ? Mode::Heuristic : (splits == 1 ? Mode::DataParallel : Mode::SplitK);
  }
  return args;
}

inline const char* status_name(cutlass::Status s) { return cutlass::cutlassGetStatusString(s); }

template <FloatType kOut, Tile kTile>
std::size_t workspace_bytes_for(const Int8GemmArgs& a, int splits) {
  return Int8Gemm<kOut, kTile>::Gemm::get_workspace_size(make_arguments<kOut, kTile>(a, splits));
}

// What a launch's Params depend on: every pointer and size (the TMA descriptors hold the
// addresses), the split and the device.
struct ParamsKey {
  const void *a, *b, *row_scales, *w_scales, *bias, *out, *workspace;
  bool w_per_channel;
  std::int64_t m, n, k;
  int splits, device;
  bool operator==(const ParamsKey& o) const {
    return a == o.a && b == o.b && row_scales == o.row_scales && w_scales == o.w_scales && bias == o.bias &&
           out == o.out && workspace == o.workspace && w_per_channel == o.w_per_channel && m == o.m && n == o.n &&
           k == o.k && splits == o.splits && device == o.device;
  }
};

// Launches with Params built once per ParamsKey and kept (a few per instantiation): building them
// encodes three TMA descriptors on the host and sets the kernel's shared-memory attribute, which
// costs about as much host time as a GPT-2-sized layer takes on the GPU. Configurations that
// need a workspace (stream-K / split-K partial sums and flags) initialise it on every call.
// Whether this file's kernels wait (griddepcontrol.wait) before reading what an earlier kernel
// wrote: only then may they be launched with programmatic dependent launch.
#ifdef CUTLASS_ENABLE_GDC_FOR_SM90
constexpr bool kWaitsForPriorGrid = true;
#else
constexpr bool kWaitsForPriorGrid = false;
#endif

template <FloatType kOut, Tile kTile>
void run_for(const Int8GemmArgs& a, int splits, void* workspace, Stream stream, bool pdl) {
  using Gemm = typename Int8Gemm<kOut, kTile>::Gemm;
  pdl = pdl && kWaitsForPriorGrid;
  using Params = typename Gemm::Params;
  struct Entry {
    ParamsKey key;
    Params params;
  };
  static std::mutex mutex;
  static std::vector<Entry> entries;  // most recent last; at most kKeep
  constexpr std::size_t kKeep = 32;

  int device = 0;
  QEVAL_CUDA_CHECK(cudaGetDevice(&device));
  const ParamsKey key{a.a,    a.b,    a.a_row_scales,  a.w_scales, a.bias, a.out, workspace, a.w_per_channel,
                      a.m,    a.n,    a.k,             splits,     device};
  {
    std::unique_lock<std::mutex> lock(mutex);
    for (auto it = entries.rbegin(); it != entries.rend(); ++it)
      if (it->key == key) {  // only workspace-free configurations are kept
        Params params = it->params;
        lock.unlock();
        const cutlass::Status s = Gemm::run(params, stream, nullptr, pdl);
        QEVAL_CUDA_EXPECT(s == cutlass::Status::kSuccess, std::string("int8 sm90 GEMM: CUTLASS run failed: ") +
                                                              status_name(s) + " (" +
                                                              cudaGetErrorString(cudaGetLastError()) + ")");
        return;
      }
  }
  const auto args = make_arguments<kOut, kTile>(a, splits);
  const bool reusable = Gemm::get_workspace_size(args) == 0;
  Gemm gemm;
  cutlass::Status s = gemm.can_implement(args);
  QEVAL_CUDA_EXPECT(s == cutlass::Status::kSuccess,
                    std::string("int8 sm90 GEMM: CUTLASS cannot implement M ") + std::to_string(a.m) + ", N " +
                        std::to_string(a.n) + ", K " + std::to_string(a.k) + ": " + status_name(s));
  s = gemm.initialize(args, workspace, stream);
  QEVAL_CUDA_EXPECT(s == cutlass::Status::kSuccess,
                    std::string("int8 sm90 GEMM: CUTLASS initialize failed: ") + status_name(s));
  s = gemm.run(stream, nullptr, pdl && reusable);
  QEVAL_CUDA_EXPECT(s == cutlass::Status::kSuccess, std::string("int8 sm90 GEMM: CUTLASS run failed: ") +
                                                        status_name(s) + " (" +
                                                        cudaGetErrorString(cudaGetLastError()) + ")");
  if (reusable) {
    std::lock_guard<std::mutex> lock(mutex);
    if (entries.size() == kKeep) entries.erase(entries.begin());
    entries.push_back({key, gemm.params()});
  }
}

}  // namespace qeval::kernels::cuda::sm90::detail
