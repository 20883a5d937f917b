// Quantisation at memory speed (issue 66, item 7): one Llama-3-8B layer's linear weights
// (q 4096x4096, k and v 1024x4096, o 4096x4096, gate and up 14336x4096, down 4096x14336: 218 M
// float32, 0.87 GB) quantised by every preset through SchemeRewrite::rewrite, the path an
// evaluation's `quantize` phase runs, against one float32 pass over the same weights measured in
// the same run: a read-and-reduce (at::sum of every matrix) and a copy. Prints, per preset, the
// median seconds and the ratio quantise / read pass (the goal: at most 2x). The weights are far
// larger than any cache, so every pass comes from memory. It measures, it never passes or fails.
// The blocks carry each weight's max |w| as an evaluation's read leaves it (its finiteness check
// computes it, eval/evaluator.cpp), so per-tensor scales take no pass of their own;
// --no-read-maxima builds them without, as before that change, for an A/B in one binary.
//
//   quantize_speed_bench [--reps 3] [--threads N] [--presets a,b,...] [--layers 1] [--no-read-maxima]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "model/block.h"
#include "model/config.h"
#include "model/weights.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/spec.h"

namespace {

using qeval::bench::load_average;
using qeval::bench::cpu_flags;
using qeval::bench::median_seconds;

// Llama-3-8B's shapes (one layer unless --layers).
qeval::ModelConfig llama3_8b(std::int64_t layers) {
  qeval::ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 128256;
  c.d_model = 4096;
  c.d_ff = 14336;
  c.n_layers = layers;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.max_seq_len = 8192;
  c.norm = qeval::NormKind::rmsnorm;
  c.position = qeval::PositionKind::rope;
  c.rope_pairing = qeval::RopePairing::half;
  c.rope_theta = 500000.0;
  c.mlp = qeval::MlpKind::swiglu;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"quantisation per preset against one float32 pass over the same weights (Llama-3-8B layer shapes)"};
  int reps = 3, threads = 0;
  std::int64_t layers = 1;
  std::string presets;
  app.add_option("--reps", reps, "timed repetitions (median)")->check(CLI::Range(1, 100));
  app.add_option("--threads", threads, "threads (0: LibTorch's default)")->check(CLI::Range(0, 1024));
  app.add_option("--presets", presets, "comma-separated presets (default: every preset that quantises linears)");
  app.add_option("--layers", layers, "layers of weights (each 0.87 GB float32)")->check(CLI::Range(1, 32));
  bool no_read_maxima = false;
  app.add_flag("--no-read-maxima", no_read_maxima, "blocks without the read's weight maxima (per-tensor scales then "
               "take their own pass)");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) at::set_num_threads(threads);

  const auto config = std::make_shared<const qeval::ModelConfig>(llama3_8b(layers));
  const std::int64_t D = config->d_model, F = config->d_ff, KV = config->n_kv_heads * (D / config->n_heads);
  at::manual_seed(0);
  std::vector<qeval::Block> blocks;
  std::vector<at::Tensor> matrices;
  for (std::int64_t l = 0; l < layers; ++l) {
    qeval::BlockWeights w;
    w.attn_norm.weight = at::ones({D});
    w.mlp_norm.weight = at::ones({D});
    w.q.weight = at::randn({D, D}) * 0.02f;
    w.k.weight = at::randn({KV, D}) * 0.02f;
    w.v.weight = at::randn({KV, D}) * 0.02f;
    w.o.weight = at::randn({D, D}) * 0.02f;
    w.gate.weight = at::randn({F, D}) * 0.02f;
    w.up.weight = at::randn({F, D}) * 0.02f;
    w.down.weight = at::randn({D, F}) * 0.02f;
    for (const at::Tensor& t : {w.q.weight, w.k.weight, w.v.weight, w.o.weight, w.gate.weight, w.up.weight, w.down.weight})
      matrices.push_back(t);
    const std::map<std::string, float> max_abs =
        no_read_maxima ? std::map<std::string, float>{} : qeval::checked_block_max_abs(w, l, "bench");
    blocks.emplace_back(config, l, std::move(w), "bench", max_abs);
  }
  std::int64_t elements = 0;
  for (const auto& m : matrices) elements += m.numel();
  const double gb = static_cast<double>(elements) * 4 / 1e9;

  fmt::print("threads {}, CPU flags: {}, {} layer(s) of Llama-3-8B linears: {:.3f} GB float32, {}, load average at start "
             "{}\n",
             at::get_num_threads(), cpu_flags(), layers, gb,
             no_read_maxima ? "without the read's maxima" : "with the read's maxima", load_average());
  double sink = 0;
  const double read_s = median_seconds([&] {
    for (const auto& m : matrices) sink += m.sum().item<double>();
  }, reps);
  std::vector<at::Tensor> copies;
  for (const auto& m : matrices) copies.push_back(at::empty_like(m));
  const double copy_s = median_seconds([&] {
    for (std::size_t i = 0; i < matrices.size(); ++i) copies[i].copy_(matrices[i]);
  }, reps);
  copies.clear();
  fmt::print("float32 pass: read-and-reduce {:.4f} s ({:.1f} GB/s), copy {:.4f} s ({:.1f} GB/s read)\n\n", read_s,
             gb / read_s, copy_s, gb / copy_s);

  std::vector<std::string> names;
  if (presets.empty()) {
    names = qeval::preset_names();
  } else {
    std::stringstream in(presets);
    for (std::string n; std::getline(in, n, ',');) names.push_back(n);
  }
  fmt::print("| preset | path | quantise s | GB/s | quantise / read pass | quantise / copy pass |\n");
  fmt::print("|---|---|---:|---:|---:|---:|\n");
  const std::vector<std::string> linear_names = qeval::model_linear_names(*config);
  for (const std::string& name : names) {
    qeval::SchemeSpec spec;
    try {
      spec = qeval::preset_scheme(name);
    } catch (const std::exception& e) {
      fmt::print("| {} | not a preset: {} | | | | |\n", name, e.what());
      continue;
    }
    if (!spec.quantizes_linears()) continue;  // full precision, kv cache only
    try {
      // The path's first word ("kernel", "reference"); the report's reason after it is long.
      std::string path = qeval::SchemeRewrite(spec, linear_names).report().value("execution_path", std::string());
      path = path.substr(0, path.find(' '));
      const double s = median_seconds([&] {
        qeval::SchemeRewrite rewrite(spec, linear_names);
        rewrite.use_model(*config);
        for (const auto& b : blocks) (void)rewrite.rewrite(b);
      }, reps);
      fmt::print("| {} | {} | {:.4f} | {:.1f} | {:.2f}x | {:.2f}x |\n", name, path, s, gb / s, s / read_s, s / copy_s);
    } catch (const std::exception& e) {
      std::string why = e.what();
      if (why.size() > 100) why = why.substr(0, 100) + "...";
      fmt::print("| {} | not run here: {} | | | | |\n", name, why);
    }
    std::fflush(stdout);
  }
  fmt::print("\nload average at end {} (sum {:.3g})\n", load_average(), sink);
  return 0;
}
