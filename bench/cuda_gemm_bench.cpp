// GPU kernel benchmark, every ratio against cuBLAS(Lt) fp16 measured in the same run:
//  - int8 at 4096³ and GPT-2 / Llama-7B layer shapes (M = 2048): the s8s32 cuBLASLt GEMM alone,
//    the linear as before issue 33 (block-per-row quantiser + cuBLASLt IMMA + separate epilogue;
//    the fallback today is the same with the one-read quantiser) and the int8 linear as dispatched (kernels/cuda/int8_linear.h: fused
//    CUTLASS sm90 GEMM + epilogue when built, per token; also per tensor), f16 in and out; then
//    (full mode) each candidate implementation's GEMM + epilogue time, which the plan chose from.
//  - 4-bit weights at M = 1, 16, 512, 2048: the W4A16 kernel, dequantise + fp16 GEMM with Ŵ
//    cached (an fp16 GEMM on Ŵ) and dequantising every call, and the dispatch's choice
//    (kW4KernelMaxM); bandwidth against the device-to-device copy at M = 1.
// Prints medians of event-timed runs and the ratios; it measures, it does not pass or fail.
// Exits non-zero with a message when no CUDA device is present.
//
//   cuda_gemm_bench [--runs 50] [--warmup 10] [--quick]
#include <CLI/CLI.hpp>
#include <c10/util/Half.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/absmax_quantize.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/int8_epilogue.h"
#include "kernels/cuda/int8_linear.h"
#include "kernels/cuda/w4_dequantize.h"
#include "kernels/cuda/w4a16_gemm.h"

namespace cu = qeval::kernels::cuda;

namespace {

// Inputs from a fixed xorshift stream: random, never zeros (zeros run faster than real data).
struct Random {
  std::uint64_t s = 0x9E3779B97F4A7C15ULL;
  std::uint64_t next() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  }
  float uniform() { return static_cast<float>(next() >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f; }
};

template <typename T>
cu::DeviceArray<T> random_device(std::size_t n, Random& rng) {
  std::vector<T> host(n);
  for (auto& v : host) {
    if constexpr (std::is_same_v<T, c10::Half>)
      v = c10::Half(rng.uniform());
    else if constexpr (std::is_same_v<T, float>)
      v = 0.5f + 0.5f * std::abs(rng.uniform());
    else
      v = static_cast<T>(rng.next());
  }
  return cu::DeviceArray<T>(host);
}

struct Options {
  int runs = 50, warmup = 10;
  bool quick = false;
};

double median_ms(const std::function<void(int)>& fn, const Options& o) {
  std::vector<float> t = cu::time_runs_ms(fn, o.warmup, o.runs);
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

double copy_bandwidth_gbs(const Options& o) {
  const std::size_t bytes = std::size_t{1} << 30;
  cu::DeviceArray<std::uint8_t> src(bytes), dst(bytes);
  cu::fill_bytes(src.get(), 0x5A, bytes);
  const double ms = median_ms([&](int) { cu::copy_on_device(dst.get(), src.get(), bytes); }, o);
  return 2.0 * bytes / (ms * 1e-3) / 1e9;  // bytes read plus bytes written
}

struct GemmShape {
  const char* name;
  std::int64_t m, n, k;
};

// One int8 linear through the dispatcher, with its own workspace.
struct Linear {
  cu::Int8LinearArgs args;
  const cu::Int8LinearPlan* plan = nullptr;
  cu::DeviceArray<std::uint8_t> workspace;
  void prepare(const cu::Int8LinearPlan& p) {
    plan = &p;
    workspace = cu::DeviceArray<std::uint8_t>(cu::int8_linear_workspace_bytes(args, p));
    args.workspace = workspace.get();
  }
  void run() const { cu::int8_linear(args, *plan); }
};

void bench_int8(const GemmShape& s, const Options& o, Random& rng, std::vector<std::string>& detail) {
  const auto M = static_cast<std::size_t>(s.m), N = static_cast<std::size_t>(s.n), K = static_cast<std::size_t>(s.k);
  auto x16 = random_device<c10::Half>(M * K, rng), w16 = random_device<c10::Half>(N * K, rng);
  cu::DeviceArray<c10::Half> y16(M * N);
  auto a8 = random_device<std::int8_t>(M * K, rng), w8 = random_device<std::int8_t>(N * K, rng);
  cu::DeviceArray<std::int32_t> c32(M * N);
  cu::DeviceArray<float> a_scales(M);
  auto w_scales = random_device<float>(N, rng), bias = random_device<float>(N, rng);

  const double t16 = median_ms([&](int) { cu::fp16_gemm(x16.get(), w16.get(), y16.get(), s.m, s.n, s.k); }, o);
  const double t8 = median_ms([&](int) { cu::int8_gemm_s32(a8.get(), w8.get(), c32.get(), s.m, s.n, s.k); }, o);
  cu::Int8EpilogueArgs ep;
  ep.acc = c32.get();
  ep.m = s.m;
  ep.n = s.n;
  ep.a_scales = a_scales.get();
  ep.w_scales = w_scales.get();
  ep.bias = bias.get();
  ep.out = y16.get();
  ep.out_type = cu::FloatType::f16;
  // The int8 linear as it was before the fused path (issue 6's kernels): per-token quantisation
  // of fp16 x by the block-per-row kernel (each row read twice), IMMA to int32, epilogue to fp16.
  cu::set_quantize_rows_kernel(cu::QuantizeRowsKernel::reread);
  const double tunfused = median_ms(
      [&](int) {
        cu::absmax_quantize_int8(x16.get(), cu::FloatType::f16, s.m, s.k, 1, a8.get(), a_scales.get());
        cu::int8_gemm_s32(a8.get(), w8.get(), c32.get(), s.m, s.n, s.k);
        cu::int8_dequantize_epilogue(ep);
      },
      o);
  cu::set_quantize_rows_kernel(cu::QuantizeRowsKernel::registers);
  // The dispatched int8 linear (the plan is timed on its first use, before these runs).
  Linear lin;
  lin.args.x = x16.get();
  lin.args.x_type = cu::FloatType::f16;
  lin.args.m = s.m, lin.args.n = s.n, lin.args.k = s.k;
  lin.args.rows_per_scale = 1;
  lin.args.w_q = w8.get();
  lin.args.w_scales = w_scales.get();
  lin.args.bias = bias.get();
  lin.args.out = y16.get();
  lin.args.out_type = cu::FloatType::f16;
  const cu::Int8LinearPlan& plan = cu::int8_linear_plan(s.m, s.n, s.k);
  lin.prepare(plan);
  const double tlin = median_ms([&](int) { lin.run(); }, o);
  lin.args.pdl = false;
  const double tnopdl = median_ms([&](int) { lin.run(); }, o);
  lin.args.pdl = true;
  Linear per_tensor;
  per_tensor.args = lin.args;
  per_tensor.args.rows_per_scale = s.m;  // one activation scale: the two-pass group quantiser
  per_tensor.prepare(plan);
  const double ttensor = median_ms([&](int) { per_tensor.run(); }, o);

  const double flops = 2.0 * s.m * s.n * s.k;
  fmt::print("{:<18} {:>5} {:>6} {:>6} | {:>7.1f} {:>7.1f} {:>7.1f} {:>7.1f} {:>7.1f} | {:>5.2f}x {:>5.2f}x {:>5.2f}x "
             "{:>5.2f}x {:>5.2f}x | {}\n",
             s.name, s.m, s.n, s.k, flops / t16 / 1e9, flops / t8 / 1e9, flops / tunfused / 1e9, flops / tlin / 1e9,
             flops / ttensor / 1e9, t16 / t8, t16 / tunfused, t16 / tlin, t16 / tnopdl, t16 / ttensor,
             plan.description);

  if (o.quick) return;
  // The one-read per-token quantiser alone (what every candidate below includes), then every
  // candidate of the plan, the whole linear, for the record.
  const double tquant = median_ms(
      [&](int) { cu::absmax_quantize_int8(x16.get(), cu::FloatType::f16, s.m, s.k, 1, a8.get(), a_scales.get()); },
      o);
  std::string line =
      fmt::format("{:<18} {:>5} {:>6} {:>6}: fp16 GEMM {:.1f} us, quantiser alone {:.1f} us;", s.name, s.m, s.n,
                  s.k, t16 * 1e3, tquant * 1e3);
  // Every register configuration of the per-token quantiser that holds a row of K (warps per row ×
  // 16-byte vectors per thread), as µs and GB/s of bytes read and written.
  std::string configs = fmt::format("{:<18} {:>5} {:>6} {:>6}: quantiser (warps x vectors):", s.name, s.m, s.n, s.k);
  const double quant_bytes = static_cast<double>(M * K) * (2 + 1);
  for (int warps : {1, 2, 4, 8})
    for (int vectors : {1, 2, 4, 8}) {
      if (!cu::absmax_quantize_rows_f16_config(x16.get(), s.m, s.k, warps, vectors, a8.get(), a_scales.get()))
        continue;
      const double t = median_ms(
          [&](int) { cu::absmax_quantize_rows_f16_config(x16.get(), s.m, s.k, warps, vectors, a8.get(), a_scales.get()); },
          o);
      configs += fmt::format("  {}x{} {:.1f} us ({:.0f} GB/s)", warps, vectors, t * 1e3, quant_bytes / t / 1e6);
    }
  detail.push_back(configs);
  for (const auto& p : cu::int8_linear_candidates(s.m, s.n, s.k)) {
    Linear cand;
    cand.args = lin.args;
    cand.prepare(p);
    const double t = median_ms([&](int) { cand.run(); }, o);
    line += fmt::format("  {} {:.1f} us ({:.2f}x)", p.description, t * 1e3, t16 / t);
  }
  detail.push_back(line);
}

struct W4Shape {
  const char* name;
  std::int64_t n, k, group;
};

void bench_w4(const W4Shape& s, std::int64_t m, double copy_gbs, const Options& o, Random& rng) {
  const std::int64_t G = (s.k + s.group - 1) / s.group;
  const std::size_t w4_bytes = static_cast<std::size_t>(s.n * s.k / 2), w16_bytes = static_cast<std::size_t>(s.n * s.k * 2);
  // Rotate among enough weight copies (≥ 200 MB in all, several times a Hopper L2) that every run
  // streams its weights from HBM, as in a real forward pass.
  constexpr double kRotateBytes = 200e6;
  const int copies4 = static_cast<int>(std::clamp(kRotateBytes / w4_bytes, 2.0, 64.0));
  const int copies16 = static_cast<int>(std::clamp(kRotateBytes / w16_bytes, 2.0, 16.0));
  std::vector<cu::DeviceArray<std::uint8_t>> qw;
  std::vector<cu::DeviceArray<float>> scales, zeros;
  for (int i = 0; i < copies4; ++i) {
    qw.push_back(random_device<std::uint8_t>(w4_bytes, rng));
    scales.push_back(random_device<float>(static_cast<std::size_t>(s.n * G), rng));
    zeros.push_back(random_device<float>(static_cast<std::size_t>(s.n * G), rng));
  }
  std::vector<cu::DeviceArray<c10::Half>> w16;
  for (int i = 0; i < copies16; ++i) w16.push_back(random_device<c10::Half>(w16_bytes / 2, rng));
  auto x = random_device<c10::Half>(static_cast<std::size_t>(m * s.k), rng);
  cu::DeviceArray<c10::Half> y(static_cast<std::size_t>(m * s.n)), scratch(w16_bytes / 2);

  auto w4a16_args = [&](int i) {
    cu::W4A16Args a;
    a.x = x.get();
    a.qweight = qw[i % copies4].get();
    a.scales = scales[i % copies4].get();
    a.zeros = zeros[i % copies4].get();
    a.y = y.get();
    a.m = m, a.n = s.n, a.k = s.k, a.group_size = s.group;
    return a;
  };
  const bool tc = cu::w4a16_tensor_core_unsupported_reason(w4a16_args(0)).empty();
  const double t4 = median_ms([&](int i) { cu::w4a16_gemm(w4a16_args(i), cu::W4A16Kernel::automatic); }, o);
  const double tsimple =
      m == 1 ? median_ms([&](int i) { cu::w4a16_gemm(w4a16_args(i), cu::W4A16Kernel::simple); }, o) : 0.0;
  // fp16 GEMM on fp16 weights: the baseline, and exactly the cached-Ŵ dequantised path's time.
  const double t16 =
      median_ms([&](int i) { cu::fp16_gemm(x.get(), w16[i % copies16].get(), y.get(), m, s.n, s.k); }, o);
  const double tdeq = median_ms(
      [&](int i) {
        cu::w4_dequantize(qw[i % copies4].get(), scales[i % copies4].get(), zeros[i % copies4].get(), s.n, s.k,
                          s.group, scratch.get(), cu::FloatType::f16);
        cu::fp16_gemm(x.get(), scratch.get(), y.get(), m, s.n, s.k);
      },
      o);
  const bool kernel = tc && m <= cu::kW4KernelMaxM;
  const double tchosen = kernel ? t4 : t16;
  const double bytes = w4_bytes + 2.0 * s.n * G * 4 + 2.0 * m * s.k + 2.0 * m * s.n;
  const double gbs = bytes / (t4 * 1e-3) / 1e9;
  fmt::print("{:<18} {:>4} {:>6} {:>6} {:>5} | {:>8.1f} {:>8.1f} {:>8.1f} {:>8} | {:>5.0f}% | {:>5.2f}x {:>5.2f}x "
             "{:>5.2f}x | {}\n",
             s.name, m, s.n, s.k, s.group, t16 * 1e3, t4 * 1e3, tdeq * 1e3,
             m == 1 ? fmt::format("{:.1f}", tsimple * 1e3) : "-", 100.0 * gbs / copy_gbs, t16 / t4, t16 / tdeq,
             t16 / tchosen, kernel ? "w4a16 kernel" : "dequantise (cached) + fp16 GEMM");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"GPU kernel benchmark: int8 GEMM and W4A16 against cuBLAS fp16, ratios from one run"};
  app.add_option("--runs", o.runs, "timed runs per measurement (median reported)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed runs before each measurement")->capture_default_str();
  app.add_flag("--quick", o.quick, "4096³ and one W4A16 shape only");
  CLI11_PARSE(app, argc, argv);

  if (cu::device_count() == 0) {
    std::fprintf(stderr, "cuda_gemm_bench: no CUDA device (%s); nothing measured\n", cu::no_device_reason().c_str());
    return 1;
  }
  try {
    Random rng;
    fmt::print("device: {}\nruns: median of {} after {} warm-up\n\n", cu::device_description(0), o.runs, o.warmup);
    const double copy_gbs = copy_bandwidth_gbs(o);
    fmt::print("device-to-device copy: {:.0f} GB/s (bytes read + written)\n\n", copy_gbs);

    std::vector<GemmShape> gemms = {{"square", 4096, 4096, 4096}};
    if (!o.quick) {
      gemms.insert(gemms.end(), {{"gpt2 c_attn", 2048, 2304, 768},
                                 {"gpt2 c_proj", 2048, 768, 768},
                                 {"gpt2 c_fc", 2048, 3072, 768},
                                 {"gpt2 mlp c_proj", 2048, 768, 3072},
                                 {"llama7b q/k/v/o", 2048, 4096, 4096},
                                 {"llama7b gate/up", 2048, 11008, 4096},
                                 {"llama7b down", 2048, 4096, 11008}});
    }
    fmt::print("int8 linear, f16 in and out (TFLOP/s; ratios = fp16 GEMM time / int8 time)\n");
    fmt::print("  s8s32 = cuBLASLt GEMM alone; before = the linear before issue 33: per-token quantise (row read\n"
               "  twice) + s8s32 + epilogue kernel;\n"
               "  linear = dispatched int8 linear, per token (nopdl: without programmatic dependent launch);\n"
               "  tensor = the same with one activation scale\n");
    fmt::print("{:<18} {:>5} {:>6} {:>6} | {:>7} {:>7} {:>7} {:>7} {:>7} | {:>6} {:>6} {:>6} {:>6} {:>6} | {}\n",
               "shape", "M", "N", "K", "fp16", "s8s32", "before", "linear", "tensor", "s8s32", "before", "linear",
               "nopdl", "tensor", "implementation");
    std::vector<std::string> detail;
    for (const auto& s : gemms) bench_int8(s, o, rng, detail);
    if (!detail.empty()) {
      fmt::print("\nint8 linear candidates (whole linear, per token, quantiser included; the plan took the fastest GEMM + "
                 "epilogue)\n");
      for (const auto& line : detail) fmt::print("{}\n", line);
    }

    std::vector<W4Shape> w4 = {{"llama7b q/k/v/o", 4096, 4096, 128}};
    std::vector<std::int64_t> ms = {1, 16, 512, 2048};
    if (o.quick) ms = {1, 2048};
    if (!o.quick) {
      w4.insert(w4.end(), {{"llama7b gate/up", 11008, 4096, 128},
                           {"llama7b down", 4096, 11008, 128},
                           {"gpt2 c_fc", 3072, 768, 128}});
    }
    fmt::print("\n4-bit weights, f16 activations (µs; ratios = fp16 GEMM time / time; copy = W4A16 bandwidth as a "
               "share of the device copy)\n");
    fmt::print("  deq+gemm = dequantise every call + fp16 GEMM; with Ŵ cached the dequantised path is the fp16 GEMM\n");
    fmt::print("{:<18} {:>4} {:>6} {:>6} {:>5} | {:>8} {:>8} {:>8} {:>8} | {:>6} | {:>6} {:>6} {:>6} | {}\n", "shape",
               "M", "N", "K", "group", "fp16", "w4a16", "deq+gemm", "simple", "copy", "w4a16", "deq", "chosen",
               "chosen path (M <= kW4KernelMaxM: kernel)");
    for (const auto& s : w4)
      for (std::int64_t m : ms) bench_w4(s, m, copy_gbs, o, rng);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_gemm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
