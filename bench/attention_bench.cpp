// Causal attention of one layer on the CPU: the whole-matrix path (every query times every key,
// mask, softmax over whole rows; what Block::attention runs where the blocked path does
// not apply), model/causal_attention_cpu.h's blocks of queries op by op, and the fused kernel
// (kernels/cpu/fused_attention_cpu.h: its AVX2 variant, and its AVX-512 one where the CPU has
// AVX-512), alternated rep by rep in one run, at SmolLM2-135M's (9 heads over 3 kv heads, head 64) and GPT-2 small's (12 heads, 64)
// shapes. Prints the best and median time of each and their ratio; it measures, it never passes
// or fails.
//
//   attention_bench [--seq 512,1024,2048] [--reps 15] [--threads 0 (the cores this process may use)]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/memory.h"
#include "kernels/compute_threads.h"
#include "kernels/cpu/fused_attention_cpu.h"
#include "kernels/fp32_gemm.h"
#include "model/causal_attention_cpu.h"

namespace {

struct Shape {
  std::string name;
  std::int64_t heads, kv_heads, head_dim;
};

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string first_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"causal attention of one layer: whole matrix, blocks of queries op by op, fused kernel"};
  std::vector<std::int64_t> seqs = {512, 1024, 2048};
  int reps = 15, threads = 0;
  app.add_option("--seq", seqs, "sequence lengths")->delimiter(',');
  app.add_option("--reps", reps, "timed repetitions of each path (alternated)")->capture_default_str();
  app.add_option("--threads", threads, "threads (0: the cores this process may use)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  qeval::keep_freed_memory_for_reuse();  // as qeval eval: the whole matrix's scores are reused, not page-faulted
  if (threads <= 0) threads = qeval::kernels::available_cores();
  qeval::kernels::set_inference_threads(threads);
  at::NoGradGuard no_grad;
  fmt::print("# attention_bench: {} threads, fp32 GEMM {}, load average at start: {}\n", threads,
             qeval::kernels::fp32_gemm_description(), first_line_of("/proc/loadavg"));
  const std::vector<Shape> shapes = {{"smollm2", 9, 3, 64}, {"gpt2-small", 12, 12, 64}};
  using qeval::kernels::cpu::FusedAttentionIsa;
  const FusedAttentionIsa widest = qeval::kernels::cpu::widest_cpu_isa();
  const bool fused_here = widest != FusedAttentionIsa::none, wide_here = widest == FusedAttentionIsa::avx512;
  fmt::print("# fused kernel: {}\n", !fused_here ? "not on this CPU (no AVX2 or FMA)"
                                     : wide_here  ? "avx2 + fma and avx512 variants"
                                                  : "avx2 + fma variant (no AVX-512 here)");
  fmt::print("| model | L | whole matrix ms (best / median) | blocked ms | fused avx2 ms | fused avx512 ms | whole / blocked "
             "| blocked / fused avx2 | fused avx2 / avx512 (best) | max |Δ| from float64: whole, blocked, avx2, avx512 |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : shapes) {
    for (std::int64_t L : seqs) {
      at::manual_seed(0);
      const std::int64_t H = s.heads, Hkv = s.kv_heads, hd = s.head_dim;
      at::Tensor q = at::randn({1, H, L, hd}), k = at::randn({1, Hkv, L, hd}), v = at::randn({1, Hkv, L, hd});
      at::Tensor mask = at::zeros({L, L}).masked_fill_(at::ones({L, L}, at::kBool).triu(1),
                                                       -std::numeric_limits<float>::infinity());
      const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
      auto probabilities = [](at::Tensor scores, const at::Tensor& m) { return at::softmax(scores.add_(m), -1); };
      // The three paths, alternated rep by rep; each keeps its last output.
      std::vector<std::function<at::Tensor()>> paths = {
          [&] {  // Block::attention's general path
            at::Tensor kr = k.repeat_interleave(H / Hkv, 1), vr = v.repeat_interleave(H / Hkv, 1);
            at::Tensor scores =
                qeval::kernels::fp32_bmm(q.reshape({H, L, hd}), kr.reshape({H, L, hd}).transpose(1, 2), scale);
            at::Tensor p = probabilities(scores.view({1, H, L, L}), mask);
            return qeval::kernels::fp32_bmm(p.reshape({H, L, L}), vr.reshape({H, L, hd}))
                .view({1, H, L, hd})
                .transpose(1, 2)
                .reshape({1, L, H * hd});
          },
          [&] { return qeval::blocked_causal_attention(q, k, v, mask, 0, scale, probabilities); }};
      for (const FusedAttentionIsa isa : {FusedAttentionIsa::avx2, FusedAttentionIsa::avx512})
        if (qeval::kernels::cpu::fused_causal_attention_fits(q, k, v, isa))
          paths.push_back([&, isa] { return qeval::kernels::cpu::fused_causal_attention(q, k, v, 0, scale, false, nullptr, isa); });
      std::vector<at::Tensor> outs(paths.size());
      std::vector<std::vector<double>> times(paths.size());
      for (int r = -1; r < reps; ++r)  // rep -1 warms up
        for (std::size_t i = 0; i < paths.size(); ++i) {
          const double t = seconds_of([&] { outs[i] = paths[i](); });
          if (r >= 0) times[i].push_back(t);
        }
      for (auto& t : times) std::sort(t.begin(), t.end());
      auto cell = [&](std::size_t i) {
        return i < times.size() ? fmt::format("{:.3f} / {:.3f}", 1e3 * times[i][0], 1e3 * times[i][times[i].size() / 2])
                                : std::string("–");
      };
      // Each path's distance from the definition in float64 (as tests/model computes it).
      const at::Tensor exact =
          at::softmax(at::matmul(q.to(at::kDouble), k.to(at::kDouble).repeat_interleave(H / Hkv, 1).transpose(-1, -2)) *
                              scale +
                          mask.to(at::kDouble),
                      -1)
              .matmul(v.to(at::kDouble).repeat_interleave(H / Hkv, 1))
              .transpose(1, 2)
              .reshape({1, L, H * hd});
      auto max_diff = [&](std::size_t i) {
        return i < outs.size() ? fmt::format("{:.1e}", (outs[i].to(at::kDouble) - exact).abs().max().item<double>())
                               : std::string("–");
      };
      auto ratio = [&](std::size_t a, std::size_t b) {
        return b < times.size() ? fmt::format("{:.2f}×", times[a][0] / times[b][0]) : std::string("–");
      };
      fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {}, {}, {}, {} |\n", s.name, L, cell(0), cell(1), cell(2),
                 cell(3), ratio(0, 1), ratio(1, 2), ratio(2, 3), max_diff(0), max_diff(1), max_diff(2), max_diff(3));
    }
  }
  fmt::print("# load average at the end: {}\n", first_line_of("/proc/loadavg"));
  return 0;
}
