// End-to-end forward speed per quantisation scheme on a GPT-2-small-shaped model (random
// weights, 124 M parameters, LM head in fp32 as the schemes leave it), kernel path and reference
// path, against full precision measured in the same run. Prints tokens/s and ratios; it measures,
// it never passes or fails.
//
// Clocks as in gemm_bench: `cpu` (process CPU time, default) counts only the cycles this process
// ran, which keeps the ratios meaningful on a machine shared with other work; run it with one
// thread (and OPENBLAS_NUM_THREADS=1) for that. `wall` with more threads on an idle machine.
//
//   OPENBLAS_NUM_THREADS=1 quant_forward_bench [--seq 256] [--batch 1] [--reps 3] [--threads 1] [--clock cpu]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "model/init.h"
#include "model/transformer.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"

namespace {

bool g_cpu_clock = true;

double now_seconds() {
  if (!g_cpu_clock)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Median of `reps` timed forwards after one untimed warm-up.
double forward_seconds(const qeval::Transformer& m, const at::Tensor& tokens, int reps) {
  (void)m.forward(tokens);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_seconds();
    (void)m.forward(tokens);
    t.push_back(now_seconds() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"forward tokens/s per quantisation scheme (GPT-2-small shape), against fp32 in the same run"};
  int seq = 256, batch = 1, reps = 3, threads = 1;
  std::string clock = "cpu";
  app.add_option("--seq", seq, "tokens per sequence")->capture_default_str();
  app.add_option("--batch", batch, "sequences per forward")->capture_default_str();
  app.add_option("--reps", reps, "timed forwards per scheme (median reported)")->capture_default_str();
  app.add_option("--threads", threads, "intra-op threads")->capture_default_str();
  app.add_option("--clock", clock, "cpu | wall")->check(CLI::IsMember({"cpu", "wall"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(threads);
  g_cpu_clock = clock == "cpu";

  const qeval::ModelConfig c = qeval::gpt2_small_config();
  const qeval::Transformer full(c, qeval::init_weights(c, 0), "random GPT-2 small");
  at::manual_seed(0);
  const at::Tensor tokens = at::randint(c.vocab_size, {batch, seq}, at::kLong);
  const double tokens_per_call = static_cast<double>(batch * seq);

  fmt::print("# quant_forward_bench: GPT-2 small shape (random), batch {} × seq {}, {} threads, {} time, median of {}\n\n",
             batch, seq, threads, clock, reps);
  fmt::print("| scheme | path | tokens/s | × full | quantise s | linear MB |\n|---|---|---:|---:|---:|---:|\n");
  const double t_full = forward_seconds(full, tokens, reps);
  fmt::print("| full | fp32 | {:.1f} | 1.00 | – | {:.1f} |\n", tokens_per_call / t_full,
             static_cast<double>(full.linear_weight_bytes()) / 1e6);
  std::fflush(stdout);
  for (const std::string name : {"int8-moderate", "int8-coarse", "int8-vectorwise", "int8-fine", "w4-zeropoint",
                                 "w4-zeropoint-g128"}) {
    for (auto preference : {qeval::ExecutionPreference::automatic, qeval::ExecutionPreference::reference}) {
      qeval::SchemeSpec spec = qeval::preset_scheme(name);
      spec.execution = preference;
      const double q0 = now_seconds();
      qeval::QuantizedModel q = qeval::quantize_model(full, spec);
      const double quantise_s = now_seconds() - q0;
      const std::string path = q.report.at("execution_path");
      const double t = forward_seconds(q.model, tokens, reps);
      fmt::print("| {} | {} | {:.1f} | {:.2f} | {:.2f} | {:.1f} |\n", name, path, tokens_per_call / t, t_full / t,
                 quantise_s, static_cast<double>(q.report.at("model_linear_bytes").get<std::int64_t>()) / 1e6);
      std::fflush(stdout);
      if (path.rfind("reference", 0) == 0) break;  // no kernel path (int8-fine): one row
    }
  }
  return 0;
}
