// GPU evaluation throughput (issue 32): tokens/s of one perplexity step (forward, full-vocabulary
// log-softmax in fp32, NLL of the next token) for qeval's full-precision and quantised models on a
// CUDA device, on random weights of real model shapes written on the device. The Hugging Face
// baseline (bench/gpu_hf_eager.py) runs the same step on the same shapes; bench/gpu_speed.sh runs
// both in one go and prints the ratios. Prints; never passes or fails.
//
//   build/bench/gpu_eval_bench [--shapes gpt2-small,llama-3.2-1b,llama-2-7b] [--dtype fp16|bf16|fp32]
//                              [--schemes full,int8-moderate,...] [--reps 5] [--json out.jsonl]
//
// Weights: N(0, 0.02²) drawn on the GPU in fp32, quantised there (the same at:: maths as on the
// CPU), then placed in the compute dtype (model/placement.h), exactly as `qeval eval --device cuda`
// places a loaded checkpoint. "full+stats" is the full model with the statistics observer of
// `qeval eval` (hidden-state and attention statistics reduced on the GPU: kernels/attention_statistics.h);
// "full+stats-unfused" the same observer on the unfused path ([B, H, L, L] probabilities, ATen
// reductions), what "full+stats" was before issue 43.
#include <ATen/ATen.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "quant/schemes/presets.h"
#include "stats/statistics.h"
#include "kernels/cuda/device.h"
#include "model/init.h"
#include "model/placement.h"
#include "model/transformer.h"
#include "quant/rewrite.h"
#include "quant/schemes/spec.h"

using namespace qeval;
using Clock = std::chrono::steady_clock;

namespace {

struct Shape {
  ModelConfig config;
  std::int64_t seq, batch;
};

ModelConfig llama_config(std::int64_t vocab, std::int64_t d, std::int64_t ff, std::int64_t layers, std::int64_t heads,
                         std::int64_t kv_heads, double theta, bool tied) {
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = vocab;
  c.d_model = d;
  c.d_ff = ff;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.max_seq_len = 4096;
  c.norm = NormKind::rmsnorm;
  c.norm_eps = 1e-5;
  c.position = PositionKind::rope;
  c.rope_pairing = RopePairing::half;
  c.rope_theta = theta;
  c.mlp = MlpKind::swiglu;
  c.tied_embeddings = tied;
  return c;
}

// The shapes of shared/gpu/2026-11-26-h200/hf_eager_anchor.py (same seq and batch).
std::map<std::string, Shape> known_shapes() {
  return {
      {"smollm2-135m", {llama_config(49152, 576, 1536, 30, 9, 3, 100000.0, true), 512, 16}},
      {"gpt2-small", {gpt2_small_config(), 1024, 8}},
      {"llama-3.2-1b", {llama_config(128256, 2048, 8192, 16, 32, 8, 500000.0, true), 1024, 8}},
      {"llama-2-7b", {llama_config(32000, 4096, 11008, 32, 32, 32, 10000.0, false), 2048, 4}},
  };
}

at::Tensor randn(at::IntArrayRef shape, const at::Device& device) {
  return at::randn(shape, at::TensorOptions().device(device).dtype(at::kFloat)).mul_(0.02);
}

// Every tensor of the config's layout, random, on `device` in fp32 (norm gains 1, biases 0).
ModelWeights random_weights(const ModelConfig& c, const at::Device& device) {
  const auto f32 = at::TensorOptions().device(device).dtype(at::kFloat);
  const std::int64_t D = c.d_model, hd = c.head_dim(), H = c.n_heads, Hkv = c.n_kv_heads, F = c.d_ff;
  auto norm = [&]() {
    NormWeights n;
    n.weight = c.norm == NormKind::rmsnorm_single ? at::ones({1}, f32) : at::ones({D}, f32);
    if (c.norm == NormKind::layernorm) n.bias = at::zeros({D}, f32);
    return n;
  };
  auto linear = [&](std::int64_t out, std::int64_t in, bool bias) {
    LinearWeights l;
    l.weight = randn({out, in}, device);
    if (bias) l.bias = at::zeros({out}, f32);
    return l;
  };
  ModelWeights w;
  w.token_embedding = randn({c.vocab_size, D}, device);
  if (c.position == PositionKind::learned) w.position_embedding = randn({c.max_seq_len, D}, device);
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    BlockWeights b;
    b.attn_norm = norm();
    if (c.fused_qkv)
      b.qkv = linear((H + 2 * Hkv) * hd, D, c.attention_bias);
    else {
      b.q = linear(H * hd, D, c.attention_bias);
      b.k = linear(Hkv * hd, D, c.attention_bias);
      b.v = linear(Hkv * hd, D, c.attention_bias);
    }
    b.o = linear(D, H * hd, c.attention_bias);
    b.mlp_norm = norm();
    b.up = linear(F, D, c.mlp_bias);
    if (c.mlp == MlpKind::swiglu) b.gate = linear(F, D, c.mlp_bias);
    b.down = linear(D, F, c.mlp_bias);
    w.blocks.push_back(std::move(b));
  }
  w.final_norm = norm();
  w.lm_head = c.tied_embeddings ? w.token_embedding : randn({c.vocab_size, D}, device);
  return w;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of one perplexity step, median of `reps` after two warm-up steps.
double step_seconds(const Transformer& model, const at::Tensor& ids, int reps, ForwardObserver* observer,
                    StatisticsCollector* stats) {
  std::int64_t window = 0;
  auto step = [&] {
    if (stats) {
      std::vector<std::int64_t> windows;
      for (std::int64_t b = 0; b < ids.size(0); ++b) windows.push_back(window++);
      stats->begin_batch(windows);
    }
    at::Tensor logits = model.forward(ids, observer);
    at::Tensor lp = at::log_softmax(logits.to(at::kFloat), -1);
    const std::int64_t L = ids.size(1);
    at::Tensor nll = -lp.narrow(1, 0, L - 1).gather(-1, ids.narrow(1, 1, L - 1).unsqueeze(-1)).mean();
    (void)nll;
    kernels::cuda::synchronize();
  };
  step();
  step();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    step();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(times);
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes_arg = "gpt2-small,llama-3.2-1b,llama-2-7b", dtype_arg = "fp16", json_path;
  std::string schemes_arg = "full,full+stats,full+stats-unfused,int8-moderate,int8-vectorwise,int8-coarse,int8-fine,w4-zeropoint-g128";
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--shapes")) shapes_arg = argv[i + 1];
    if (!std::strcmp(argv[i], "--dtype")) dtype_arg = argv[i + 1];
    if (!std::strcmp(argv[i], "--schemes")) schemes_arg = argv[i + 1];
    if (!std::strcmp(argv[i], "--reps")) reps = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--json")) json_path = argv[i + 1];
  }
  if (kernels::cuda::device_count() == 0) {
    fmt::print("gpu_eval_bench: no CUDA device ({}); nothing measured\n", kernels::cuda::no_device_reason());
    return 0;
  }
  const at::Device device = parse_device("cuda");
  const Placement placement{device, parse_dtype(dtype_arg, device)};
  fmt::print("device: {}\ndtype: {}\n", describe_device(device), dtype_name(placement.dtype));
  std::ofstream json;
  if (!json_path.empty()) json.open(json_path);
  at::manual_seed(0);
  const auto shapes = known_shapes();
  fmt::print("\n| model shape | seq × batch | scheme | tok/s | vs full | what ran |\n|---|---|---|---:|---:|---|\n");
  for (const std::string& name : split(shapes_arg)) {
    const auto found = shapes.find(name);
    if (found == shapes.end()) {
      fmt::print("unknown shape {}\n", name);
      return 2;
    }
    const Shape& s = found->second;
    const Transformer full32(s.config, random_weights(s.config, device), name);  // fp32 on the device
    const at::Tensor ids =
        at::randint(s.config.vocab_size, {s.batch, s.seq}, at::TensorOptions().device(device).dtype(at::kLong));
    PlacementCache cache(placement);
    double full_seconds = 0;
    for (const std::string& scheme : split(schemes_arg)) {
      std::string what;
      double seconds = 0;
      if (scheme == "full" || scheme == "full+stats" || scheme == "full+stats-unfused") {
        const Transformer model = full32.placed(cache);
        StatisticsOptions options;
        options.fused = scheme == "full+stats";
        options.attention_windows = s.config.attention_windows;
        StatisticsCollector stats(options);
        const bool observed = scheme != "full";
        seconds = step_seconds(model, ids, reps, observed ? &stats : nullptr, observed ? &stats : nullptr);
        what = !observed ? "cuBLAS GEMMs, fused attention"
                         : "statistics observer on: attention " +
                               stats.summary().value("attention_statistics", std::string("?")) + ", hidden " +
                               stats.summary().value("hidden_statistics", std::string("?"));
        if (!observed) full_seconds = seconds;
      } else {
        SchemeSpec spec = resolve_scheme(scheme);
        QuantizedModel q = quantize_model(full32, spec);
        const Transformer model = q.model.placed(cache);
        seconds = step_seconds(model, ids, reps, nullptr, nullptr);
        const nlohmann::json engines = engines_used_report(model);
        what = engines.is_null() ? std::string("?") : engines.dump();
      }
      const double tps = static_cast<double>(s.batch * s.seq) / seconds;
      fmt::print("| {} | {} × {} | {} | {:.0f} | {} | {} |\n", name, s.seq, s.batch, scheme, tps,
                 full_seconds > 0 ? fmt::format("{:.2f}×", full_seconds / seconds) : std::string("-"), what);
      std::fflush(stdout);
      if (json.is_open())
        json << fmt::format(R"({{"shape": "{}", "seq": {}, "batch": {}, "dtype": "{}", "scheme": "{}", "tokens_per_s": {:.1f}}})",
                            name, s.seq, s.batch, dtype_name(placement.dtype), scheme, tps)
             << "\n";
    }
  }
  return 0;
}
