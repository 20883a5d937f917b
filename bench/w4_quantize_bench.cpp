// 4-bit zero-point weight quantisation: the fused kernel (kernels/w4_quantize.h, what
// quantize_w4_weight runs on the CPU) against the ATen reference composition it replaced
// (quantize_w4_weight_reference), on Llama-3-8B's linear shapes with random weights, per channel
// and per group of 128, in the same run. Checks the two agree bit for bit before timing; prints
// seconds, GB/s of float32 read and the ratio. It measures, it never passes or fails. --variant
// times one of the kernel's CPU variants (kernels/w4_quantize.h) where this CPU runs it.
//
//   w4_quantize_bench [--reps 3] [--threads N] [--variant dispatched|avx512|avx2|portable]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/w4_quantize.h"
#include "quant/packed_weights.h"

namespace {

using qeval::bench::load_average;
using qeval::bench::median_seconds;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"4-bit weight quantisation: fused kernel against the ATen composition"};
  int reps = 3, threads = 0;
  std::string variant = "dispatched";
  app.add_option("--reps", reps, "timed repetitions (median)")->check(CLI::Range(1, 100));
  app.add_option("--threads", threads, "threads (0: LibTorch's default)")->check(CLI::Range(0, 1024));
  app.add_option("--variant", variant, "the kernel's variant: dispatched (the widest this CPU runs), avx512, avx2, portable")
      ->check(CLI::IsMember({"dispatched", "avx512", "avx2", "portable"}));
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) at::set_num_threads(threads);
  using qeval::Granularity;
  using qeval::QuantKind;
  using qeval::QuantSpec;
  namespace cpu = qeval::kernels::cpu;
  using Variant = qeval::kernels::W4Rows (*)(const at::Tensor&, std::int64_t, bool);
  const Variant run = variant == "avx512" ? cpu::quantize_w4_rows_avx512
                      : variant == "avx2" ? cpu::quantize_w4_rows_avx2
                      : variant == "portable" ? cpu::quantize_w4_rows_portable
                                              : qeval::kernels::quantize_w4_rows;
  if ((variant == "avx512" && !cpu::cpu_runs(cpu::CpuIsa::avx512)) || (variant == "avx2" && !cpu::w4_quantize_avx2_available())) {
    fmt::print(stderr, "this CPU does not run the {} variant\n", variant);
    return 1;
  }
  const std::string dispatched = cpu::cpu_runs(cpu::CpuIsa::avx512) ? "avx512"
                                 : cpu::w4_quantize_avx2_available() ? "avx2"
                                                                     : "portable";
  fmt::print("threads {}, kernel variant {}, CPU flags: {}, load average {}\n", at::get_num_threads(),
             variant == "dispatched" ? dispatched : variant, qeval::bench::cpu_flags(), load_average());
  fmt::print("| shape [N, K] | granularity | reference s | kernel s | kernel GB/s | speed-up |\n|---|---|---:|---:|---:|---:|\n");
  at::manual_seed(0);
  for (const auto& [N, K] : std::vector<std::pair<std::int64_t, std::int64_t>>{{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}}) {
    const at::Tensor w = at::randn({N, K}) * 0.02f;
    for (const QuantSpec& spec : {QuantSpec{QuantKind::int4_zeropoint, Granularity::channel, 0},
                                  QuantSpec{QuantKind::int4_zeropoint, Granularity::group, 128}}) {
      const std::int64_t g = spec.granularity == Granularity::channel ? K : spec.group_size;
      const qeval::kernels::W4Rows a = run(w, g, false);
      const qeval::W4Weight b = qeval::quantize_w4_weight_reference(w, spec, "w");
      if (!a.packed.equal(b.qweight) || !a.scales.equal(b.scales) || !a.zeros.equal(b.zeros)) {
        fmt::print(stderr, "the kernel and the reference differ on [{}, {}]\n", N, K);
        return 1;
      }
      const double ref = median_seconds([&] { (void)qeval::quantize_w4_weight_reference(w, spec, "w"); }, reps);
      const double ker = median_seconds([&] { (void)run(w, g, false); }, reps);
      fmt::print("| [{}, {}] | {} | {:.4f} | {:.4f} | {:.1f} | {:.1f}x |\n", N, K,
                 spec.granularity == Granularity::channel ? "channel" : "group 128", ref, ker,
                 static_cast<double>(N * K * 4) / ker / 1e9, ref / ker);
    }
  }
  return 0;
}
