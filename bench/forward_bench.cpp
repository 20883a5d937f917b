// fp32 forward throughput (issues 2, 16): tokens/s on stories260K, on a GPT-2-small-shaped model
// (random weights, 124M parameters, seq 1024) and on any checkpoint given with --model (at
// --seq), with the achieved FLOP rate as a fraction of this machine's fp32 GEMM peak measured in
// the same run: the faster of LibTorch's at::matmul (the installed BLAS) and qeval's fp32 GEMM
// (kernels/fp32_gemm.h) on 2048³. Prints; never passes or fails.
//
// Threads as `qeval eval` sets them (kernels/compute_threads.h: LibTorch's pool of T, default the
// cores this process may use; OpenBLAS on one thread, fp32 GEMMs cut into slices over the pool).
//
//   build/bench/forward_bench [--data-dir DIR] [--windows N] [--threads T] [--model PATH --seq L]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/core.h>

#include <chrono>
#include <cstring>
#include <string>

#include "common/files.h"
#include "common/memory.h"
#include "common/model_cache.h"
#include "kernels/compute_threads.h"
#include "kernels/fp32_gemm.h"
#include "loaders/checkpoints/checkpoint.h"
#include "model/init.h"
#include "model/transformer.h"

using namespace qeval;
using Clock = std::chrono::steady_clock;

namespace {

template <typename F>
double best_seconds(int repeats, F&& f) {
  f();  // warm-up: first-touch allocation, OpenBLAS thread start
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// FLOPs of one forward over L tokens as this implementation computes it: every linear
// (2·in·out per token), the full L×L score and value products per head (masking happens after
// the product), and the LM head.
double forward_flops(const Transformer& m, std::int64_t L) {
  double flops = 0;
  for (const auto& l : m.linears())
    flops += 2.0 * static_cast<double>(l.linear->in_features() * l.linear->out_features()) * static_cast<double>(L);
  const auto& c = m.config();
  flops += static_cast<double>(c.n_layers) * 2 * 2.0 * static_cast<double>(L * L * c.n_heads * c.head_dim());
  return flops;
}

void report(const char* name, const Transformer& m, std::int64_t L, int windows, double gemm_gflops) {
  at::Tensor tokens = at::randint(m.config().vocab_size, {1, L}, at::kLong);
  double s = best_seconds(windows, [&] { (void)m.forward(tokens); });
  double gflops = forward_flops(m, L) / s / 1e9;
  fmt::print("| {} | {} | {:.1f} M | {:.0f} | {:.1f} | {:.0f}% |\n", name, L,
             static_cast<double>(m.config().parameter_count()) / 1e6, static_cast<double>(L) / s, gflops,
             100 * gflops / gemm_gflops);
}

}  // namespace

int main(int argc, char** argv) {
  keep_freed_memory_for_reuse();  // as qeval's main does
  std::optional<std::string> data_dir;
  int windows = 3;
  std::string model_path;
  std::int64_t model_seq = 512;
  int threads = kernels::available_cores();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--data-dir")) data_dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--model")) model_path = argv[i + 1];
    if (!std::strcmp(argv[i], "--seq")) model_seq = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--windows")) windows = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::stoi(argv[i + 1]);
  }
  kernels::set_inference_threads(threads);
  at::manual_seed(0);
  // Baseline: the fp32 GEMM rate of this machine, now, with these threads.
  const std::int64_t n = 2048;
  at::Tensor a = at::randn({n, n}), b = at::randn({n, n});
  const at::Tensor bt = b.t().contiguous();  // [N, K] as a linear weight
  const double flop = 2.0 * n * n * n;
  const double blas_gflops = flop / best_seconds(5, [&] { (void)at::matmul(a, b); }) / 1e9;
  const double qeval_gflops = flop / best_seconds(5, [&] { (void)kernels::fp32_linear(a, bt, at::Tensor()); }) / 1e9;
  const double gemm_gflops = std::max(blas_gflops, qeval_gflops);
  // The GPT-2 MLP shape at seq 1024, for reference.
  at::Tensor x = at::randn({1024, 768}), w = at::randn({3072, 768});
  double mlp_s = best_seconds(5, [&] { (void)kernels::fp32_linear(x, w, at::Tensor()); });
  fmt::print("threads: {}\nfp32 GEMM 2048³: at::matmul (BLAS) {:.1f} GFLOP/s, qeval fp32 GEMM ({}) {:.1f} GFLOP/s; "
             "peak (baseline) {:.1f}\nGPT-2 c_fc 1024×768×3072 (qeval fp32 GEMM): {:.1f} GFLOP/s\n\n",
             at::get_num_threads(), blas_gflops, kernels::fp32_gemm_description(), qeval_gflops, gemm_gflops,
             2.0 * 1024 * 768 * 3072 / mlp_s / 1e9);

  fmt::print("| model | seq | params | tokens/s | GFLOP/s | of GEMM baseline |\n|---|---:|---:|---:|---:|---:|\n");
  LoadedCheckpoint stories = load_checkpoint(resolve_data_dir(data_dir) / "models/stories260K/stories260K.bin");
  report("stories260K", Transformer(stories.config, stories.weights), 512, windows * 3, gemm_gflops);

  const ModelConfig gpt2 = gpt2_small_config();
  report("GPT-2 small (random)", Transformer(gpt2, init_weights(gpt2, 0)), 1024, windows, gemm_gflops);
  if (!model_path.empty()) {
    LoadedCheckpoint ck = load_checkpoint(resolve_model_path(model_path, data_dir));
    report(ck.path.filename().string().c_str(), Transformer(ck.config, ck.weights), model_seq, windows, gemm_gflops);
  }
  return 0;
}
