// Causal attention of one layer on the CPU: the whole-matrix path (every query times every key,
// mask, softmax over whole rows; what Transformer::attention runs where the blocked path does
// not apply) against model/causal_attention_cpu.h's blocks of queries, alternated rep by rep in
// one run, at SmolLM2-135M's (9 heads over 3 kv heads, head 64) and GPT-2 small's (12 heads, 64)
// shapes. Prints the best and median time of each and their ratio; it measures, it never passes
// or fails.
//
//   attention_bench [--seq 512,1024,2048] [--reps 15] [--threads 0 (the cores this process may use)]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/memory.h"
#include "kernels/compute_threads.h"
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
  CLI::App app{"causal attention of one layer: whole matrix against blocks of queries"};
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
  fmt::print("| model | L | whole matrix ms (best / median) | blocked ms (best / median) | whole / blocked (best) | max |Δ| |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : shapes) {
    for (std::int64_t L : seqs) {
      at::manual_seed(0);
      const std::int64_t H = s.heads, Hkv = s.kv_heads, hd = s.head_dim;
      at::Tensor q = at::randn({1, H, L, hd}), k = at::randn({1, Hkv, L, hd}), v = at::randn({1, Hkv, L, hd});
      at::Tensor mask = at::zeros({L, L}).masked_fill_(at::ones({L, L}, at::kBool).triu(1),
                                                       -std::numeric_limits<float>::infinity());
      const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
      auto probabilities = [](at::Tensor scores, const at::Tensor& m) { return at::softmax(scores.add_(m), -1); };
      at::Tensor whole_out, blocked_out;
      auto whole = [&] {  // Transformer::attention's general path
        at::Tensor kr = k.repeat_interleave(H / Hkv, 1), vr = v.repeat_interleave(H / Hkv, 1);
        at::Tensor scores = qeval::kernels::fp32_bmm(q.reshape({H, L, hd}), kr.reshape({H, L, hd}).transpose(1, 2), scale);
        at::Tensor p = probabilities(scores.view({1, H, L, L}), mask);
        whole_out = qeval::kernels::fp32_bmm(p.reshape({H, L, L}), vr.reshape({H, L, hd}))
                        .view({1, H, L, hd})
                        .transpose(1, 2)
                        .reshape({1, L, H * hd});
      };
      auto blocked = [&] { blocked_out = qeval::blocked_causal_attention(q, k, v, mask, 0, scale, probabilities); };
      whole();
      blocked();
      std::vector<double> tw, tb;
      for (int r = 0; r < reps; ++r) {
        tw.push_back(seconds_of(whole));
        tb.push_back(seconds_of(blocked));
      }
      std::sort(tw.begin(), tw.end());
      std::sort(tb.begin(), tb.end());
      fmt::print("| {} | {} | {:.3f} / {:.3f} | {:.3f} / {:.3f} | {:.2f}× | {:.1e} |\n", s.name, L, 1e3 * tw[0],
                 1e3 * tw[tw.size() / 2], 1e3 * tb[0], 1e3 * tb[tb.size() / 2], tw[0] / tb[0],
                 (whole_out - blocked_out).abs().max().item<float>());
    }
  }
  fmt::print("# load average at the end: {}\n", first_line_of("/proc/loadavg"));
  return 0;
}
