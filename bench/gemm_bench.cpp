// CPU GEMM benchmark at transformer layer shapes: the int8 kernel path (the backend the dispatch
// picks: oneDNN s8 × s8 on VNNI/AMX CPUs, the AVX2 kernel without VNNI; with the scale epilogue,
// alone and with the fused per-token activation quantisation in front) and the 4-bit weight
// kernel, each against the evaluator's fp32 GEMM (kernels/fp32_gemm.h), measured in the same run. The header
// prints the CPU's SIMD flags and the load average (at the start and the end): other work on the
// machine slows every variant, which the interleaving spreads evenly but does not remove.
// Prints medians and ratios (fp32 time / kernel time, so > 1 means faster than fp32); it measures,
// it never passes or fails.
//
// Shapes are (K, N) of y[M, N] = x[M, K] · W[N, K]ᵀ: SmolLM2-135M (d 576, d_ff 1536, k/v 192),
// GPT-2 small (768 wide), GPT-2 medium (1024 wide), Llama-7B (4096 wide, d_ff 11008), for
// M ∈ {1, 16, 512, 2048}. Before every timed
// call the last-level cache is flushed (a 2× L3-sized buffer is written), so small-M calls read
// their weights from memory as a model far larger than the cache does; variants are interleaved
// in each repetition so load from other processes hits them alike.
//
// Clocks: `wall` is elapsed time; `cpu` is the process's CPU time (clock_gettime
// CLOCK_PROCESS_CPUTIME_ID), which on a machine shared with other work counts only the cycles
// this process ran, not the time slices it waited for. With one thread CPU time is the work of
// one core; with more threads it adds up all of them, spinning included, so use `wall` on an idle
// machine to see parallel speed. --threads sizes LibTorch's pool as `qeval eval --threads` does
// (the BLAS stays on one thread; see main).
//
//   gemm_bench --threads 1 --clock cpu [--families smollm2,gpt2-small,gpt2-medium,llama-7b]
//              [--m 1,16,512,2048] [--reps 5] [--max-seconds 60] [--json out.json] [--no-flush]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "common/build_info.h"
#include "common/memory.h"
#include "kernels/compute_threads.h"
#include "kernels/fp32_gemm.h"
#include "kernels/cpu/int8_gemm_cpu.h"
#include "kernels/int8_gemm.h"
#include "kernels/int8_quantize.h"
#include "kernels/w4_gemm.h"
#include "quant/packed_weights.h"

using Clock = std::chrono::steady_clock;

namespace {

using qeval::bench::load_average;

bool g_cpu_clock = false;

double now_seconds() {
  if (!g_cpu_clock) return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct LayerShape {
  std::string family, layer;
  std::int64_t K, N;
};

std::vector<LayerShape> family_shapes(const std::string& family) {
  if (family == "smollm2")
    return {{family, "attn.q/o", 576, 576}, {family, "attn.k/v", 576, 192}, {family, "mlp.gate/up", 576, 1536},
            {family, "mlp.down", 1536, 576}};
  if (family == "smollm2-head")  // the LM head: fp32 in every preset, int8 with --quantize-lm-head
    return {{family, "lm_head", 576, 49152}};
  if (family == "gpt2-small")
    return {{family, "attn.qkv", 768, 2304}, {family, "attn.o", 768, 768}, {family, "mlp.up", 768, 3072},
            {family, "mlp.down", 3072, 768}};
  if (family == "gpt2-medium")
    return {{family, "attn.qkv", 1024, 3072}, {family, "attn.o", 1024, 1024}, {family, "mlp.up", 1024, 4096},
            {family, "mlp.down", 4096, 1024}};
  if (family == "llama-7b")
    return {{family, "attn.q/k/v/o", 4096, 4096}, {family, "mlp.gate/up", 4096, 11008},
            {family, "mlp.down", 11008, 4096}};
  throw std::runtime_error("unknown family '" + family + "'; valid: smollm2, smollm2-head, gpt2-small, gpt2-medium, llama-7b");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Writing a buffer twice the L3 size evicts whatever the previous call left in the caches.
class CacheFlusher {
 public:
  explicit CacheFlusher(bool enabled) : enabled_(enabled) {
    if (enabled_) buffer_ = at::zeros({256LL * 1024 * 1024 / 4}, at::kFloat);  // 256 MiB ≥ 2 × 105 MiB L3
  }
  void operator()() {
    if (enabled_) buffer_.add_(1.0f);
  }

 private:
  bool enabled_;
  at::Tensor buffer_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Times each variant `reps` times, interleaved, cache flushed before every call; one untimed
// warm-up call each first (primitive creation, first-touch allocation, thread start).
std::vector<double> time_interleaved(const std::vector<std::function<void()>>& variants, int reps,
                                     CacheFlusher& flush) {
  for (const auto& v : variants) v();
  std::vector<std::vector<double>> samples(variants.size());
  for (int r = 0; r < reps; ++r) {
    for (std::size_t i = 0; i < variants.size(); ++i) {
      flush();
      const double t0 = now_seconds();
      variants[i]();
      samples[i].push_back(now_seconds() - t0);
    }
  }
  std::vector<double> out;
  for (auto& s : samples) out.push_back(median(s));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  qeval::keep_freed_memory_for_reuse();  // as qeval eval: no page faults on every call's output
  CLI::App app{"CPU GEMM benchmark: the int8 kernel and the 4-bit kernel against fp32 at layer shapes"};
  std::string families = "smollm2,gpt2-small,gpt2-medium,llama-7b", ms = "1,16,512,2048", json_path;
  int reps = 5, threads = 2;
  std::string clock = "wall";
  double max_seconds = 60.0;
  bool no_flush = false;
  app.add_option("--families", families, "comma-separated: smollm2, smollm2-head, gpt2-small, gpt2-medium, llama-7b")
      ->capture_default_str();
  app.add_option("--m", ms, "comma-separated row counts M (tokens)")->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions per variant (median reported)")->capture_default_str();
  app.add_option("--threads", threads, "threads, as qeval eval --threads (LibTorch's pool; the BLAS on one)")
      ->capture_default_str();
  app.add_option("--max-seconds", max_seconds, "skip remaining (large) cases once this much time has passed")
      ->capture_default_str();
  app.add_option("--clock", clock, "wall | cpu (process CPU time; see the file header)")
      ->check(CLI::IsMember({"wall", "cpu"}))
      ->capture_default_str();
  app.add_option("--json", json_path, "also write every measurement as JSON here");
  app.add_flag("--no-flush", no_flush, "do not flush the caches between calls");
  CLI11_PARSE(app, argc, argv);

  // Threads as `qeval eval` sets them (kernels/compute_threads.h): LibTorch's pool `threads`, the
  // BLAS on one thread, and the fp32 baseline is the evaluator's own fp32 GEMM (kernels::fp32_linear:
  // oneDNN's brgemm where the CPU has it, else the GEMM cut into single-threaded BLAS calls run on
  // LibTorch's pool). Until 2026-11-26 the baseline was at::linear with OpenBLAS on `threads`
  // threads of its own: interleaved with the int8 kernel, OpenBLAS's idle workers kept spinning
  // on the cores the int8 kernel's threads needed (2 threads ran the int8 GEMM no faster than 1
  // on a 2-core EPYC), and LibTorch's spinning workers slowed OpenBLAS in turn.
  qeval::kernels::set_inference_threads(threads);
  g_cpu_clock = clock == "cpu";
  at::manual_seed(0);
  CacheFlusher flush(!no_flush);
  const auto started = Clock::now();
  nlohmann::json record = {{"host", qeval::host_info()},
                           {"threads", threads},
                           {"reps", reps},
                           {"cache_flush", !no_flush},
                           {"clock", clock},
                           {"git_commit", qeval::git_commit()},
                           {"int8_backend", qeval::kernels::to_string(qeval::kernels::int8_gemm_cpu_backend())},
                           {"w4_variant", qeval::kernels::w4_gemm_variant()},
                           {"fp32_gemm", qeval::kernels::fp32_gemm_description()},
                           {"cpu_flags", qeval::bench::cpu_flags()},
                           {"load_average_start", load_average()},
                           {"results", nlohmann::json::array()}};
  fmt::print("# gemm_bench: {} threads, {} time, median of {} reps, caches {}; ratios = fp32 time / kernel time\n",
             threads, clock, reps, no_flush ? "not flushed" : "flushed before every call");
  fmt::print("# CPU: {}; SIMD flags: {}; load average at start: {}\n", qeval::host_info().value("cpu", "?"),
             record["cpu_flags"].get<std::string>(), record["load_average_start"].get<std::string>());
  fmt::print("# fp32 GEMM: {}; int8 backend: {}; 4-bit kernel: {}\n\n", record["fp32_gemm"].get<std::string>(),
             record["int8_backend"].get<std::string>(), qeval::kernels::w4_gemm_variant());
  fmt::print("| model | layer | K | N | M | fp32 ms | int8 GEMM ms | ×fp32 | quant+int8 ms | ×fp32 | w4 ms | ×fp32 | "
             "int8 impl |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");

  std::vector<std::int64_t> m_values;
  for (const auto& m : split(ms)) m_values.push_back(std::stoll(m));
  bool stopped = false;
  for (const auto& family : split(families)) {
    for (const LayerShape& shape : family_shapes(family)) {
      const std::int64_t K = shape.K, N = shape.N;
      at::Tensor w = at::randn({N, K}) / std::sqrt(static_cast<double>(K));  // [N, K]
      at::Tensor bias = at::randn({N}) * 0.01;
      qeval::Int8Weight w8 =
          qeval::quantize_int8_weight(w, {qeval::QuantKind::int8_absmax, qeval::Granularity::channel, 0}, "bench");
      qeval::W4Weight w4 =
          qeval::quantize_w4_weight(w, {qeval::QuantKind::int4_zeropoint, qeval::Granularity::channel, 0}, "bench");
      qeval::W4Weight w4g =
          qeval::quantize_w4_weight(w, {qeval::QuantKind::int4_zeropoint, qeval::Granularity::group, 128}, "bench");
      const double fp32_bytes = static_cast<double>(N * K * 4);
      for (std::int64_t M : m_values) {
        if (std::chrono::duration<double>(Clock::now() - started).count() > max_seconds) {
          stopped = true;
          break;
        }
        at::Tensor x = at::randn({M, K});
        qeval::kernels::Int8Rows xq = qeval::kernels::quantize_int8_rows(x, 1);
        std::vector<std::function<void()>> variants = {
            [&] { (void)qeval::kernels::fp32_linear(x, w, bias); },
            [&] { (void)qeval::kernels::int8_gemm(xq.q, w8.q, xq.scales, w8.scales, bias); },
            [&] {
              qeval::kernels::Int8Rows a = qeval::kernels::quantize_int8_rows(x, 1);
              (void)qeval::kernels::int8_gemm(a.q, w8.q, a.scales, w8.scales, bias);
            }};
        const bool small = M <= 16;
        if (small)
          variants.push_back([&] { (void)qeval::kernels::w4_gemm(x, w4.qweight, w4.scales, w4.zeros, K, bias); });
        std::vector<double> t = time_interleaved(variants, reps, flush);
        const std::string impl = record["int8_backend"] == "onednn" ? "onednn " + qeval::kernels::cpu::onednn_int8_impl(M, K, N)
                                                                     : record["int8_backend"].get<std::string>();
        const std::string w4_cell = small ? fmt::format("{:.3f} | {:.2f}", t[3] * 1e3, t[0] / t[3]) : "– | –";
        fmt::print("| {} | {} | {} | {} | {} | {:.3f} | {:.3f} | {:.2f} | {:.3f} | {:.2f} | {} | {} |\n", family,
                   shape.layer, K, N, M, t[0] * 1e3, t[1] * 1e3, t[0] / t[1], t[2] * 1e3, t[0] / t[2], w4_cell, impl);
        std::fflush(stdout);
        nlohmann::json r = {{"family", family},       {"layer", shape.layer},   {"K", K},
                            {"N", N},                 {"M", M},                 {"fp32_s", t[0]},
                            {"int8_gemm_s", t[1]},    {"quant_int8_gemm_s", t[2]}, {"int8_impl", impl},
                            {"w4_weight_bytes_ratio", static_cast<double>(w4.bytes()) / fp32_bytes},
                            {"w4_g128_weight_bytes_ratio", static_cast<double>(w4g.bytes()) / fp32_bytes},
                            {"int8_weight_bytes_ratio", static_cast<double>(w8.bytes()) / fp32_bytes}};
        if (small) r["w4_s"] = t[3];
        record["results"].push_back(r);
      }
      if (stopped) break;
    }
    if (stopped) break;
  }
  if (stopped) fmt::print("\n(stopped after --max-seconds {}: remaining cases not measured)\n", max_seconds);

  // Weight bytes: packed codes + float32 scales (+ zeros) against float32 weights.
  fmt::print("\n| model | layer | K | N | int8/fp32 bytes | w4 per-channel/fp32 | w4 g128/fp32 |\n|---|---|---|---|---|---|---|\n");
  std::map<std::string, bool> seen;
  for (const auto& r : record["results"]) {
    const std::string key = r["family"].get<std::string>() + r["layer"].get<std::string>();
    if (seen[key]) continue;
    seen[key] = true;
    fmt::print("| {} | {} | {} | {} | {:.4f} | {:.4f} | {:.4f} |\n", r["family"].get<std::string>(),
               r["layer"].get<std::string>(), r["K"].get<std::int64_t>(), r["N"].get<std::int64_t>(),
               r["int8_weight_bytes_ratio"].get<double>(), r["w4_weight_bytes_ratio"].get<double>(),
               r["w4_g128_weight_bytes_ratio"].get<double>());
  }
  record["load_average_end"] = load_average();
  fmt::print("\n# {:.0f} s in all; load average at the end: {}\n",
             std::chrono::duration<double>(Clock::now() - started).count(), record["load_average_end"].get<std::string>());
  if (!json_path.empty()) std::ofstream(json_path) << record.dump(2) << "\n";
  return 0;
}
