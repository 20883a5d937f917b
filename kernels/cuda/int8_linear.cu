// The int8 linear layer (kernels/cuda/int8_linear.h): quantise x once, then either the fused
// CUTLASS GEMM + epilogue (kernels/cuda/sm90/, when built) or cuBLASLt IMMA + the separate
// epilogue, with the choice timed once per shape.
//
// Why time instead of a rule: at the shapes an evaluation runs, which kernel wins depends on
// how the output tiles fill 132 SMs (GPT-2's N = 768 gives 96 tiles of 128×128 at M = 2048,
// fewer than the SMs; Llama's gate/up gives 344 tiles of 128×256) and on K per tile; split-K
// and stream-K trade partial-sum traffic for occupancy. Timing the few candidates (under a
// millisecond per shape) is cheaper and more reliable than a model of that. The quantiser is
// the same for every candidate, so only GEMM + epilogue are timed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/absmax_quantize.h"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/int8_epilogue.h"
#include "kernels/cuda/int8_linear.h"
#ifdef QEVAL_WITH_CUTLASS
#include "kernels/cuda/sm90/int8_gemm_sm90.h"
#endif

namespace qeval::kernels::cuda {
namespace {

enum class Mode { automatic, cutlass, cublaslt };

Mode mode_from_env() {
  static const Mode mode = [] {
    const char* v = std::getenv("QEVAL_INT8_LINEAR");
    const std::string s = v ? v : "auto";
    if (s == "cublaslt") return Mode::cublaslt;
    if (s == "cutlass") return Mode::cutlass;
    return Mode::automatic;
  }();
  return mode;
}

bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("QEVAL_INT8_PDL");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

bool tuning_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("QEVAL_INT8_LINEAR_TUNE");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// Workspace layout: every piece 256-byte aligned (the GEMMs want 16).
struct Pieces {
  std::size_t q = 0, scales = 0, row_scales = 0, out_scales = 0, acc = 0, cutlass = 0, total = 0;
};

Pieces layout(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t rows_per_scale,
              std::int64_t out_rows_per_scale, bool fused, std::size_t cutlass_bytes) {
  Pieces p;
  std::size_t at = 0;
  auto take = [&at](std::size_t bytes) {
    const std::size_t start = at;
    at = round_up(at + bytes, 256);
    return start;
  };
  const auto M = static_cast<std::size_t>(m), N = static_cast<std::size_t>(n), K = static_cast<std::size_t>(k);
  const std::int64_t rows = std::max<std::int64_t>(1, std::min(rows_per_scale, m));
  p.q = take(M * K);
  p.scales = take(static_cast<std::size_t>((m + rows - 1) / rows) * sizeof(float));
  p.row_scales = take(M * sizeof(float));
  p.out_scales = take(out_rows_per_scale > 0 ? M * sizeof(float) : 0);
  p.acc = take(fused ? 0 : M * N * sizeof(std::int32_t));
  p.cutlass = take(fused ? cutlass_bytes : 0);
  p.total = at;
  return p;
}

#ifdef QEVAL_WITH_CUTLASS
sm90::Config config_of(const Int8LinearPlan& plan) {
  return {static_cast<sm90::Tile>(plan.cutlass_tile), plan.cutlass_splits};
}

sm90::Int8GemmArgs gemm_args(const Int8LinearArgs& a, const std::int8_t* q, const float* row_scales) {
  sm90::Int8GemmArgs g;
  g.a = q;
  g.b = a.w_q;
  g.a_row_scales = row_scales;
  g.w_scales = a.w_scales;
  g.w_per_channel = a.w_per_channel;
  g.bias = a.bias;
  g.out = a.out;
  g.out_type = a.out_type;
  g.m = a.m;
  g.n = a.n;
  g.k = a.k;
  return g;
}
#endif

// Whether these arguments run the plan's CUTLASS kernel (else the fallback).
bool runs_fused(const Int8LinearArgs& a, const Int8LinearPlan& plan) {
#ifdef QEVAL_WITH_CUTLASS
  if (plan.path != Int8LinearPath::cutlass_sm90) return false;
  sm90::Int8GemmArgs g = gemm_args(a, nullptr, nullptr);
  g.a = reinterpret_cast<const std::int8_t*>(std::uintptr_t{256});  // q lives in the 256-aligned workspace
  return sm90::unsupported_reason(g).empty();
#else
  (void)a;
  (void)plan;
  return false;
#endif
}

void run_fallback(const Int8LinearArgs& a, const std::int8_t* q, const float* scales, std::int64_t rows,
                  std::int32_t* acc, float* out_scales, Stream stream) {
  int8_gemm_s32(q, a.w_q, acc, a.m, a.n, a.k, stream);
  Int8EpilogueArgs ep;
  ep.acc = acc;
  ep.m = a.m;
  ep.n = a.n;
  ep.a_scales = scales;
  ep.a_rows_per_scale = rows;
  ep.w_scales = a.w_scales;
  ep.w_per_channel = a.w_per_channel;
  ep.bias = a.bias;
  ep.out = a.out;
  ep.out_type = a.out_type;
  ep.out_rows_per_scale = a.out_rows_per_scale;
  ep.out_scales = out_scales;
  int8_dequantize_epilogue(ep, stream);
}

// ---- the plan: candidates timed once per (device, M, N, K) ----

struct Candidate {
  Int8LinearPlan plan;
};

std::vector<Candidate> candidates(std::int64_t m, std::int64_t n, std::int64_t k, int device, Mode mode) {
  std::vector<Candidate> out;
#ifdef QEVAL_WITH_CUTLASS
  int major = 0, minor = 0;
  QEVAL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  QEVAL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  sm90::Int8GemmArgs probe;
  probe.a = probe.b = reinterpret_cast<const std::int8_t*>(std::uintptr_t{256});
  probe.out = reinterpret_cast<void*>(std::uintptr_t{256});
  probe.out_type = FloatType::f16;
  probe.m = m, probe.n = n, probe.k = k;
  const bool cutlass_ok = major == 9 && minor == 0 && sm90::unsupported_reason(probe).empty();
  if (cutlass_ok && mode != Mode::cublaslt) {
    const sm90::Config configs[] = {
        {sm90::Tile::large, 1},    {sm90::Tile::pingpong, 1}, {sm90::Tile::small, 1},
        {sm90::Tile::small, 0},    {sm90::Tile::small, 2},    {sm90::Tile::small, 3}};
    for (const auto& c : configs) {
      // Split-K only where K leaves each split at least 4 k-tiles of 128.
      if (c.splits > 1 && k / c.splits < 512) continue;
      Candidate cand;
      cand.plan.path = Int8LinearPath::cutlass_sm90;
      cand.plan.cutlass_tile = static_cast<int>(c.tile);
      cand.plan.cutlass_splits = c.splits;
      for (FloatType t : {FloatType::f32, FloatType::f16, FloatType::bf16}) {  // the same plan serves every output
        sm90::Int8GemmArgs typed = probe;
        typed.out_type = t;
        cand.plan.cutlass_workspace_bytes = std::max(cand.plan.cutlass_workspace_bytes, sm90::workspace_bytes(typed, c));
      }
      cand.plan.description = "cutlass sm90 fused (" + sm90::to_string(c) + ")";
      out.push_back(cand);
    }
  }
#else
  (void)device;
  (void)m, (void)n, (void)k;
#endif
  if (out.empty() || mode == Mode::automatic) {
    Candidate cand;
    cand.plan.path = Int8LinearPath::cublaslt_epilogue;
    cand.plan.description = "cublaslt + epilogue";
    out.push_back(cand);
  }
  return out;
}

// Rule used when timing is off: big tile if its tiles fill the GPU, else stream-K on small tiles.
std::size_t rule_choice(const std::vector<Candidate>& c, std::int64_t m, std::int64_t n, int device) {
  if (c.front().plan.path != Int8LinearPath::cutlass_sm90) return 0;
  int sms = 0;
  QEVAL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::int64_t large_tiles = ((m + 127) / 128) * ((n + 255) / 256);
  const bool large = large_tiles >= sms;
  const int wanted_tile = large ? 0 : 1;  // sm90::Tile::large or sm90::Tile::small (built without CUTLASS too)
  for (std::size_t i = 0; i < c.size(); ++i)
    if (c[i].plan.path == Int8LinearPath::cutlass_sm90 && c[i].plan.cutlass_tile == wanted_tile &&
        (large || c[i].plan.cutlass_splits == 0))
      return i;
  return 0;
}

// Times each candidate's GEMM + epilogue on scratch buffers (f16 output, per-token scales,
// per-channel weights, bias) and returns the fastest's index.
std::size_t timed_choice(const std::vector<Candidate>& c, std::int64_t m, std::int64_t n, std::int64_t k) {
  if (c.size() == 1) return 0;
  const auto M = static_cast<std::size_t>(m), N = static_cast<std::size_t>(n), K = static_cast<std::size_t>(k);
  std::size_t ws = 0;
  for (const auto& cand : c)
    ws = std::max(ws, layout(m, n, k, 1, 0, cand.plan.path == Int8LinearPath::cutlass_sm90,
                             cand.plan.cutlass_workspace_bytes).total);
  DeviceArray<std::int8_t> w(N * K);
  DeviceArray<float> w_scales(N), bias(N);
  DeviceArray<std::uint16_t> out(M * N);
  DeviceArray<std::uint8_t> workspace(ws);
  fill_bytes(w.get(), 0x35, N * K);
  fill_bytes(workspace.get(), 0x4B, ws);  // q = 0x4B = 75 everywhere, scales ~1.3e7: finite products
  fill_bytes(w_scales.get(), 0x30, N * sizeof(float));
  fill_bytes(bias.get(), 0x30, N * sizeof(float));
  synchronize();  // the fills ran on the legacy stream; the timing stream does not wait for it
  cudaStream_t stream = nullptr;
  QEVAL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Int8LinearArgs a;
  a.m = m, a.n = n, a.k = k;
  a.w_q = w.get();
  a.w_scales = w_scales.get();
  a.bias = bias.get();
  a.out = out.get();
  a.out_type = FloatType::f16;
  std::size_t best = 0;
  float best_ms = 0.0f;
  try {
    for (std::size_t i = 0; i < c.size(); ++i) {
      const Pieces p = layout(m, n, k, 1, 0, c[i].plan.path == Int8LinearPath::cutlass_sm90,
                              c[i].plan.cutlass_workspace_bytes);
      auto* base = static_cast<std::uint8_t*>(static_cast<void*>(workspace.get()));
      auto gemm = [&] {
        const auto* q = reinterpret_cast<const std::int8_t*>(base + p.q);
        auto* scales = reinterpret_cast<float*>(base + p.scales);
#ifdef QEVAL_WITH_CUTLASS
        if (c[i].plan.path == Int8LinearPath::cutlass_sm90) {
          sm90::run(gemm_args(a, q, scales), config_of(c[i].plan), base + p.cutlass, stream);
          return;
        }
#endif
        run_fallback(a, q, scales, 1, reinterpret_cast<std::int32_t*>(base + p.acc), nullptr, stream);
      };
      const std::vector<float> t = time_runs_ms([&](int) { gemm(); }, 3, 10, stream);
      std::vector<float> sorted = t;
      std::sort(sorted.begin(), sorted.end());
      const float ms = sorted[sorted.size() / 2];
      if (i == 0 || ms < best_ms) best = i, best_ms = ms;
    }
  } catch (...) {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    throw;
  }
  QEVAL_CUDA_CHECK(cudaStreamSynchronize(stream));
  QEVAL_CUDA_CHECK(cudaStreamDestroy(stream));
  return best;
}

struct PlanCache {
  std::mutex mutex;
  std::map<std::tuple<int, std::int64_t, std::int64_t, std::int64_t>, Int8LinearPlan> plans;
};

PlanCache& plan_cache() {
  static PlanCache* c = new PlanCache();  // never destroyed: plans may be used from static destructors
  return *c;
}

}  // namespace

bool int8_linear_cutlass_built() noexcept {
#ifdef QEVAL_WITH_CUTLASS
  return true;
#else
  return false;
#endif
}

const Int8LinearPlan& int8_linear_plan(std::int64_t m, std::int64_t n, std::int64_t k) {
  const std::string reason = int8_linear_unsupported_reason(m, n, k);
  QEVAL_CUDA_EXPECT(reason.empty(), reason);
  int device = 0;
  QEVAL_CUDA_CHECK(cudaGetDevice(&device));
  PlanCache& cache = plan_cache();
  const auto key = std::make_tuple(device, m, n, k);
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.plans.find(key);
    if (it != cache.plans.end()) return it->second;
  }
  // Timed outside the lock (it synchronises); a racing thread may time the same shape, and the
  // first plan stored wins (std::map references stay valid).
  const std::vector<Candidate> c = candidates(m, n, k, device, mode_from_env());
  const std::size_t choice = tuning_enabled() ? timed_choice(c, m, n, k) : rule_choice(c, m, n, device);
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.plans.emplace(key, c[choice].plan).first->second;
}

std::vector<Int8LinearPlan> int8_linear_candidates(std::int64_t m, std::int64_t n, std::int64_t k) {
  const std::string reason = int8_linear_unsupported_reason(m, n, k);
  QEVAL_CUDA_EXPECT(reason.empty(), reason);
  int device = 0;
  QEVAL_CUDA_CHECK(cudaGetDevice(&device));
  std::vector<Int8LinearPlan> plans;
  for (const Candidate& c : candidates(m, n, k, device, Mode::automatic)) plans.push_back(c.plan);
  return plans;
}

std::size_t int8_linear_workspace_bytes(const Int8LinearArgs& a, const Int8LinearPlan& plan) {
  const bool fused = runs_fused(a, plan);
  return layout(a.m, a.n, a.k, a.rows_per_scale, a.out_rows_per_scale, fused, plan.cutlass_workspace_bytes).total;
}

Int8LinearPath int8_linear(const Int8LinearArgs& a, const Int8LinearPlan& plan, Stream stream) {
  if (a.m <= 0 || a.n <= 0 || a.k <= 0 || a.k % 4 != 0 || a.n % 4 != 0 || a.k > kInt8GemmMaxK)
    QEVAL_CUDA_EXPECT(false, int8_linear_unsupported_reason(a.m, a.n, a.k));
  QEVAL_CUDA_EXPECT(a.x && a.w_q && a.w_scales && a.out && a.workspace,
                    "int8_linear: x, w_q, w_scales, out and workspace are required (M " + std::to_string(a.m) +
                        ", N " + std::to_string(a.n) + ", K " + std::to_string(a.k) + ")");
  QEVAL_CUDA_EXPECT(a.rows_per_scale > 0, "int8_linear: rows_per_scale must be positive, got " +
                                              std::to_string(a.rows_per_scale));
  const bool fused = runs_fused(a, plan);
  const Pieces p = layout(a.m, a.n, a.k, a.rows_per_scale, a.out_rows_per_scale, fused, plan.cutlass_workspace_bytes);
  auto* base = static_cast<std::uint8_t*>(a.workspace);
  auto* q = reinterpret_cast<std::int8_t*>(base + p.q);
  auto* scales = reinterpret_cast<float*>(base + p.scales);
  auto* out_scales = a.out_rows_per_scale > 0 ? reinterpret_cast<float*>(base + p.out_scales) : nullptr;
  const std::int64_t rows = std::min(a.rows_per_scale, a.m);

  // Per-row scales are written on both paths: with them, groups of rows are quantised in one read.
  auto* row_scales = reinterpret_cast<float*>(base + p.row_scales);
  if (!fused) {
    absmax_quantize_int8_rows(a.x, a.x_type, a.m, a.k, rows, q, scales, row_scales, stream);
    run_fallback(a, q, scales, rows, reinterpret_cast<std::int32_t*>(base + p.acc), out_scales, stream);
    return Int8LinearPath::cublaslt_epilogue;
  }
#ifdef QEVAL_WITH_CUTLASS
  absmax_quantize_int8_rows(a.x, a.x_type, a.m, a.k, rows, q, scales, row_scales, stream);
  sm90::run(gemm_args(a, q, row_scales), config_of(plan), base + p.cutlass, stream, a.pdl && pdl_enabled());
  if (a.out_rows_per_scale > 0) int8_output_quantize_dequantize(a.out, a.out_type, a.m, a.n, a.out_rows_per_scale,
                                                                out_scales, stream);
#endif
  return Int8LinearPath::cutlass_sm90;
}

}  // namespace qeval::kernels::cuda
