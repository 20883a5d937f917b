// GPTQ's solve at Llama-3-8B's shapes (issue 77 item 7): one layer's seven linears (q and o
// 4096x4096, k and v 1024x4096, gate and up 14336x4096, down 4096x14336) solved by gptq_solve
// with gptq-w4-g128's options (4 bits, groups of 128, symmetric, descending-Hessian order,
// dampening 0.01, blocks of 128) on a Hessian 2/T Σ x xᵀ of T random calibration rows. Prints per
// distinct shape the median seconds and, for bench/gptq_solve_speed.sh, one machine-readable line
// "solve N K SECONDS" that the script sets beside llm-compressor's quantize_weight on the same
// shapes (bench/gptq_solve_llmc.py). It measures, it never passes or fails.
//
//   gptq_solve_bench [--reps 1] [--threads N] [--tokens 512] [--shapes 4096x4096,1024x4096,...]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/bench_support.h"
#include "quant/calibration/gptq_solve.h"

int main(int argc, char** argv) {
  CLI::App app{"GPTQ's solve at Llama-3-8B's shapes"};
  int reps = 1, threads = 0;
  std::int64_t tokens = 512;
  std::string shapes = "4096x4096,1024x4096,14336x4096,4096x14336";
  app.add_option("--reps", reps, "repetitions per shape (the median is printed)")->check(CLI::Range(1, 20));
  app.add_option("--threads", threads, "intra-op threads (0: every core, as qeval eval)")->check(CLI::Range(0, 256));
  app.add_option("--tokens", tokens, "calibration rows the Hessian sums")->check(CLI::Range(1, 1 << 20));
  app.add_option("--shapes", shapes, "N x K of each weight, comma-separated");
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));

  qeval::GptqOptions options;  // gptq-w4-g128: llm-compressor 0.14's W4A16 defaults
  options.bits = 4;
  options.group_size = 128;
  options.symmetric = true;
  options.order = qeval::GptqOrder::descending_hessian;
  options.group_params = qeval::GptqGroupParams::original;

  {  // warm-up: the first solve pays LAPACK's and the allocator's start
    const at::Tensor w = at::randn({64, 256}), x = at::randn({64, 256});
    (void)qeval::gptq_solve(w, at::matmul(x.t(), x), options);
  }
  fmt::print("# GPTQ solve, gptq-w4-g128's options, Hessian of {} rows; {} threads; CPU flags: {}; load average {}\n",
             tokens, at::get_num_threads(), qeval::bench::cpu_flags(), qeval::bench::load_average());
  fmt::print("| N x K | seconds (median of {}) |\n|---|---:|\n", reps);
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= shapes.size()) {
    const std::size_t end = std::min(shapes.find(',', start), shapes.size());
    const std::string shape = shapes.substr(start, end - start);
    start = end + 1;
    const std::size_t x = shape.find('x');
    if (x == std::string::npos) {
      fmt::print(stderr, "--shapes: '{}' is not NxK\n", shape);
      return 2;
    }
    const std::int64_t N = std::stoll(shape.substr(0, x)), K = std::stoll(shape.substr(x + 1));
    at::manual_seed(0);
    const at::Tensor weight = at::randn({N, K}) * 0.02;
    at::Tensor inputs = at::randn({tokens, K});
    inputs.select(1, 0).mul_(40);  // an outlier channel, as real inputs have
    const at::Tensor hessian = at::matmul(inputs.t(), inputs) * (2.0 / static_cast<double>(tokens));
    const double seconds = qeval::bench::median_seconds([&] { (void)qeval::gptq_solve(weight, hessian, options); }, reps);
    fmt::print("| {} x {} | {:.2f} |\n", N, K, seconds);
    lines.push_back(fmt::format("solve {} {} {:.4f}", N, K, seconds));
  }
  for (const std::string& l : lines) fmt::print("{}\n", l);
  return 0;
}
