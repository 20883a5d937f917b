#include "eval/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/host_memory.h"
#include "common/sizes.h"
#include "kernels/device.h"
#include "quant/quantized_linear.h"
#include "model/block.h"
#include "eval/vocab_scoring.h"

namespace qeval {
namespace {

// What the process holds before any weight when its RSS is not known: the binary and LibTorch's
// libraries (170 MiB for `qeval data-dir` on Debian's LibTorch 1.13), the tokenizer and the data
// stream (stories260K's eval: 188 MiB).
constexpr std::int64_t kProcessBaseline = 190ll << 20;
// What the process grows by besides the plan's terms: allocator metadata and caches, oneDNN's
// primitives and scratchpads, the statistics' per-window records, the record itself.
constexpr std::int64_t kProcessGrowth = 24ll << 20;

struct NamedShape {
  std::string name;
  std::int64_t out = 0, in = 0;
};

// x·r for a ratio r in [0, 1], saturated as x is.
Size scaled(Size x, double r) {
  return x.saturated() ? x : Size(static_cast<std::int64_t>(static_cast<double>(x.value()) * r));
}

std::vector<NamedShape> block_linears(const ModelConfig& c, std::int64_t layer) {
  std::vector<NamedShape> out;
  for (const std::string& name : block_linear_names(c, layer)) {
    const LinearShape s = linear_shape(c, name);
    out.push_back({name, s.out, s.in});
  }
  return out;
}

// Elements a block's forward holds per token at its peak (intermediates, twice for the per-sequence
// outputs stacked), by the layer's kinds; `L` the window length.
Size working_per_token(const ModelConfig& c, std::int64_t layer, Size L) {
  const Size D = c.d_model;
  Size n = 4 * D;
  switch (c.mixer(layer)) {
    case MixerKind::attention:
      n += (c.n_heads + 2 * c.n_kv_heads) * c.head_dim() + c.n_heads * c.head_dim();
      break;
    case MixerKind::mamba:  // in_proj, conv, x_proj, Δ, y; the scan's chunks are bounded (model/selective_scan.cpp)
      n += 6 * c.ssm_d_inner + c.ssm_dt_rank + 2 * c.ssm_d_state;
      break;
    case MixerKind::mamba2: {  // in_proj, conv, y, gate; the SSD's [H, T, T] masks and chunk states
      const Size T = min(c.ssm_chunk, L);
      n += 4 * c.ssm_d_inner + 2 * c.ssm_conv_dim(MixerKind::mamba2) + 3 * c.ssm_heads * T +
           2 * c.ssm_d_inner * c.ssm_d_state / max(T, 1);
      break;
    }
  }
  switch (c.ffn(layer)) {
    case FfnKind::dense: n += 3 * c.d_ff; break;
    case FfnKind::moe: n += 3 * c.moe_top_k * c.expert_d_ff() + 3 * c.moe_shared_d_ff + 2 * c.moe_experts; break;
    case FfnKind::none: break;
  }
  return n;
}

// Bytes a scheme's quantised copy of one linear holds beyond the full-precision weight it shares.
Size quantised_bytes(const QuantSpec& w, Size out, Size in) {
  const Size groups = w.granularity == Granularity::group && w.group_size > 0 ? (in + w.group_size - 1) / w.group_size : 1;
  const Size scales = w.granularity == Granularity::tensor ? 1 : out * groups;
  switch (w.kind) {
    case QuantKind::int8_absmax: return out * in + scales * 4;
    case QuantKind::int4_zeropoint: return out * ((in + 1) / 2) + scales * 8;
    case QuantKind::fp8:
    case QuantKind::mx:
    case QuantKind::nvfp4:
    case QuantKind::ggml: return out * in * 4;  // dequantised once to float32 (quant/float_quantize.h, quant/schemes/ggml_rules.h)
    case QuantKind::none: return 0;
  }
  return 0;
}

struct SchemeLayerBytes {
  Size held = 0;       // quantised weights of the layer
  Size transient = 0;  // the largest dequantised weight a forward makes (reference paths, large-M 4-bit)
};

// `device_float_bytes`: on a GPU, the compute dtype's size, because a linear without an integer
// kernel there (int8 with per-feature activation scales, int8-fine) also holds its dequantised
// weight in that dtype for its GEMM (docs/gpu.md); 0 on the CPU, which dequantises per call.
SchemeLayerBytes scheme_layer_bytes(const SchemeSpec& spec, const ModelConfig& c, std::int64_t layer,
                                    Size device_float_bytes) {
  SchemeLayerBytes b;
  const bool dequantised_on_device =
      device_float_bytes > 0 && spec.weights.kind == QuantKind::int8_absmax && !kernel_path_unavailable_reason(spec).empty();
  for (const NamedShape& l : block_linears(c, layer)) {
    if (!spec.selects(l.name)) continue;
    b.held += quantised_bytes(spec.weights, l.out, l.in);
    if (dequantised_on_device) b.held += l.out * l.in * device_float_bytes;
    if (spec.weights.enabled()) b.transient = max(b.transient, l.out * l.in * 4);
  }
  return b;
}

Size round_down(Size x, Size multiple) { return x / multiple * multiple; }

struct Terms {
  Size fixed_host = 0, per_window_host = 0;
  Size fixed_device = 0, per_window_device = 0;
  nlohmann::json breakdown = nlohmann::json::object();
};

Terms plan_terms(const PlanInputs& in, const std::string& plan) {
  const ModelConfig& c = in.config;
  const bool gpu = !in.placement.on_cpu();
  // --dtype fp64 on the CPU: activations are float64, and every scheme's placed layer holds its
  // linears' exact float64 weights beside the float32 source (quant/quantized_linear.cpp).
  const bool fp64 = !gpu && in.placement.dtype == at::kDouble;
  const Size dsize = gpu || fp64 ? at::elementSize(in.placement.dtype) : 4;
  const Size D = c.d_model, V = c.vocab_size, L = max(in.seq_len, 2);
  const Size B = in.batch_size, S = static_cast<std::int64_t>(in.schemes.size());
  const Size Vb = min(kVocabBlock, V);
  Terms t;
  auto add = [&](const char* name, Size host, Size device) {
    t.fixed_host += host;
    t.fixed_device += device;
    t.breakdown[name] = gpu ? nlohmann::json{{"host", host}, {"device", device}} : nlohmann::json(host);
  };

  // Weights. Largest stored tensor bytes ≈ the largest block's stored share, converted one tensor at a time.
  const Size blocks_fp32 = [&] {
    Size total = 0;
    for (Size b : in.parts.blocks) total += b;
    return total;
  }();
  const Size largest_block = in.parts.largest_block();
  const Size head_fp32 = V * D * 4;
  const double stored_ratio = in.parts.total() > 0 ? static_cast<double>(in.parts.stored) / static_cast<double>(in.parts.total()) : 1.0;
  const Size conversion = scaled(largest_block, std::min(stored_ratio, 1.0));
  Size schemes_all = 0, schemes_layer = 0, transient = 0, heads = 0;
  for (const auto& spec : in.schemes) {
    if (!spec) continue;
    Size largest = 0;
    for (std::int64_t layer = 0; layer < c.n_layers; ++layer) {
      const SchemeLayerBytes b = scheme_layer_bytes(*spec, c, layer, gpu ? dsize : 0);
      schemes_all += b.held;
      largest = max(largest, b.held);
      transient = max(transient, b.transient);
    }
    schemes_layer = max(schemes_layer, largest);
    // selects() is what the rewrite asks (eval/schemes.cpp): quantize_lm_head with an include list
    // that leaves the head out (a sensitivity unit of a gguf-* preset) keeps it in full precision.
    if (spec->selects("lm_head")) heads += quantised_bytes(spec->weights, V, D);
  }
  // A scheme with its own checkpoint holds float32 layers as full precision does (all of them when
  // the plan keeps the schemes' blocks, else one at a time) and, when the plan keeps full
  // precision's head, its own head's blocks (counted whole: where its rows equal full precision's
  // they are shared, which this upper bound ignores).
  schemes_all += in.own_checkpoints * blocks_fp32;
  schemes_layer = max(schemes_layer, in.own_checkpoints > 0 ? largest_block + conversion : Size(0));
  // A measured RSS already holds the weights of a reader that read them at open.
  add("process", in.process_rss > 0 ? in.process_rss + kProcessGrowth : kProcessBaseline + in.reader_resident, 0);
  const bool keep_full = plan != "streamed", keep_schemes = plan == "resident";
  // Held for the whole run: what the plan keeps.
  const Size full_kept = keep_full && !in.reader_in_memory ? blocks_fp32 + head_fp32 : 0;
  const Size schemes_kept = keep_schemes ? schemes_all : 0;
  if (gpu) {
    // Blocks are read onto the device in float32 and each scheme is built there (eval/evaluator.cpp);
    // the host holds no weights. `resident` keeps every scheme's placed blocks (full precision's in
    // the compute dtype) and drops the float32 block once its layer is built; `resident-weights`
    // keeps the float32 blocks to rebuild the schemes from per chunk. The head's vocabulary
    // blocks are kept in the compute dtype.
    const Size head_device = head_fp32 / 4 * dsize;
    const Size kept_device = !keep_full ? 0 : keep_schemes ? blocks_fp32 / 4 * dsize + schemes_kept : blocks_fp32;
    add("weights_held", 0, keep_full ? kept_device + (1 + in.own_checkpoints) * head_device : 0);
  } else {
    add("weights_held", full_kept + schemes_kept + (keep_full ? in.own_checkpoints * head_fp32 : 0), 0);
    // float64 copies, for every scheme: of all its layers and heads when `resident` keeps them, else of
    // the head only (a layer's copies are in the layer phase below).
    if (fp64) add("float64_weights", (keep_schemes ? S * blocks_fp32 * 2 : 0) + S * head_fp32 * 2, 0);
  }
  if (heads > 0) add("quantised_heads", heads, gpu ? heads : 0);

  // The transients, of which the larger phase counts: a layer (its float32 block as read and the
  // conversion of its largest tensor, one scheme's quantised copy, the largest dequantised weight
  // a reference-path forward makes, the block's intermediates for one batch, the attention
  // probabilities statistics ask for, the statistics' float64 copies) or the head (a vocabulary
  // block of its rows as read, the logits of one span of positions per scheme and full
  // precision's with their exponentials; a rewritten head is built once from the whole float one).
  const bool any_attention = std::any_of(in.attention_statistics.begin(), in.attention_statistics.end(), [](bool b) { return b; });
  Size per_token = 0, prob_heads = 0;  // of attention
  bool state_space = false;
  for (std::int64_t layer = 0; layer < c.n_layers; ++layer) {
    per_token = max(per_token, working_per_token(c, layer, L));
    if (c.mixer(layer) == MixerKind::attention) prob_heads = max(prob_heads, c.n_heads);
    state_space = state_space || c.mixer(layer) != MixerKind::attention;
  }
  const Size working = B * L * per_token * dsize * 3 / 2;
  // A state-space layer's implicit attention is reduced in blocks (stats/implicit_attention.h): a
  // handful of float64 temporaries of at most 2^22 elements, whatever L.
  const Size implicit_blocks = state_space ? Size(6 * (std::int64_t{1} << 22) * 8) : Size(0);
  const Size probs = any_attention ? max(2 * B * prob_heads * L * L * 4, implicit_blocks) : 0;
  const Size stats = B * L * D * 8;
  const Size read_layer = keep_full && !gpu ? 0 : largest_block + conversion;
  const Size layer_fp64 = fp64 && !keep_schemes ? 2 * largest_block * 2 : 0;  // a layer's float64 copies, two schemes at a time
  const Size layer_host =
      read_layer + (keep_schemes ? 0 : schemes_layer) + transient + layer_fp64 + (gpu ? stats : working + probs + stats);
  // On the device, a layer being built: its float32 block and the next one's (read ahead), their
  // copy in the compute dtype, and one scheme's rewritten layer at a time.
  const Size read_device = keep_full && !keep_schemes ? 0 : 2 * largest_block;
  const Size layer_device =
      gpu ? read_device + largest_block / 4 * dsize + (keep_schemes ? 0 : 2 * schemes_layer) + working + probs : 0;
  const Size head_rows = Vb * D * 4 + scaled(Vb * D * 4, std::min(stored_ratio, 1.0));
  const Size logits = 6 * B * min(kScoreRows, L - 1) * Vb * (fp64 ? 8 : 4);
  const Size head_host = (keep_full && !gpu ? 0 : head_rows) + (gpu ? 0 : logits) + (heads > 0 ? head_fp32 : 0);
  const Size head_device = gpu ? Vb * D * dsize + logits : 0;
  t.breakdown["layer_phase"] = gpu ? nlohmann::json{{"host", layer_host}, {"device", layer_device}} : nlohmann::json(layer_host);
  t.breakdown["head_phase"] = gpu ? nlohmann::json{{"host", head_host}, {"device", head_device}} : nlohmann::json(head_host);
  t.fixed_host += max(layer_host, head_host);
  t.fixed_device += max(layer_device, head_device);

  // Per window of the chunk: every scheme's residual stream (then its head input), the whole
  // logits of rewritten heads, and the scorer's per-token state.
  Size per_window = S * L * D * dsize + L * S * 48;
  for (const auto& spec : in.schemes)
    if (spec && spec->selects("lm_head")) per_window += (L - 1) * V * 4;
  if (gpu) {
    t.per_window_device = per_window;
    t.per_window_host = L * 64;
  } else {
    t.per_window_host = per_window;
  }
  t.breakdown["per_window"] = gpu ? nlohmann::json{{"host", t.per_window_host}, {"device", t.per_window_device}}
                                  : nlohmann::json(t.per_window_host);
  return t;
}

PlanEstimate estimate(const PlanInputs& in, const MemoryBudget& budget, const std::string& name, Size forced_chunk) {
  const Terms t = plan_terms(in, name);
  PlanEstimate e;
  e.plan.name = name;
  e.plan.keep_full_blocks = name != "streamed";
  e.plan.keep_scheme_blocks = name == "resident";
  // On a GPU the host is idle while a layer computes: it reads and quantises the next one meanwhile.
  e.plan.prefetch_next_layer = !in.placement.on_cpu();
  const Size B = in.batch_size;
  // Every window the run has, in whole batches: no chunk holds more (a chunk of --chunk-windows
  // 10^18 over 3 windows holds 3, and is estimated as 3).
  const Size all = in.windows > 0 ? (Size(in.windows) + B - 1) / B * B : B;
  Size chunk = B;
  if (forced_chunk > 0) {
    chunk = min(max(B, round_down(forced_chunk, B)), max(B, all));
  } else if (name != "resident") {
    // As many windows as fit, so the checkpoint is read (and the schemes rebuilt) as few times as possible.
    Size fit = all;
    if (t.per_window_host > 0) fit = min(fit, (Size(budget.host) - t.fixed_host) / t.per_window_host);
    if (budget.device > 0 && t.per_window_device > 0)
      fit = min(fit, (Size(budget.device) - t.fixed_device) / t.per_window_device);
    chunk = max(B, round_down(fit, B));
  }
  e.plan.chunk_windows = chunk.value();
  const Size host = t.fixed_host + t.per_window_host * chunk;
  const Size device = in.placement.on_cpu() ? Size(0) : t.fixed_device + t.per_window_device * chunk;
  // Saturated (past 64 bits) is an estimate like any other: more than any budget.
  e.host_bytes = host.value();
  e.device_bytes = device.value();
  e.breakdown = t.breakdown;
  e.fits = !host.saturated() && host <= budget.host && (in.placement.on_cpu() || (!device.saturated() && device <= budget.device));
  // Freed memory kept for reuse costs resident memory above the live tensors; where the estimate
  // leaves less than that much room, each layer's is handed back (EvalPlan::release_memory_per_layer).
  e.plan.release_memory_per_layer = name == "streamed" && 2 * host > budget.host;
  return e;
}

std::string plan_needs(const PlanEstimate& e, bool gpu) {
  return gpu ? fmt::format("{} needs ~{} host and ~{} device", e.plan.name, format_size(e.host_bytes),
                           format_size(e.device_bytes))
             : fmt::format("{} needs ~{}", e.plan.name, format_size(e.host_bytes));
}

}  // namespace

MemoryBudget memory_budget(std::int64_t max_memory, std::int64_t max_device_memory, const Placement& placement) {
  MemoryBudget b;
  const HostMemory host = read_host_memory();
  b.host = host.usable();
  b.host_source = host.usable_source();
  if (max_memory > 0 && max_memory < b.host) {
    b.host = max_memory;
    b.host_source = fmt::format("--max-memory {}", format_bytes(max_memory));
  }
  if (!placement.on_cpu()) {
    const kernels::DeviceMemory device = kernels::device_memory(placement.device);
    b.device = device.free;
    b.device_source = fmt::format("free on {}: {} of {}", placement.device.str(), format_bytes(device.free), format_bytes(device.total));
    if (max_device_memory > 0 && max_device_memory < b.device) {
      b.device = max_device_memory;
      b.device_source = fmt::format("--max-device-memory {}", format_bytes(max_device_memory));
    }
  }
  return b;
}

std::vector<PlanEstimate> estimate_plans(const PlanInputs& inputs, const MemoryBudget& budget) {
  std::vector<PlanEstimate> out;
  for (const char* name : {"resident", "resident-weights", "streamed"}) out.push_back(estimate(inputs, budget, name, 0));
  return out;
}

PlanEstimate choose_plan(const PlanInputs& inputs, const MemoryBudget& budget, const std::string& forced,
                         std::int64_t chunk_windows) {
  const bool gpu = !inputs.placement.on_cpu();
  if (!forced.empty() && forced != "auto") {
    QEVAL_CHECK(forced == "resident" || forced == "resident-weights" || forced == "streamed",
                "--plan '{}': expected auto, resident, resident-weights or streamed", forced);
    PlanEstimate e = estimate(inputs, budget, forced, chunk_windows);
    const bool host_short = e.host_bytes > budget.host;
    QEVAL_CHECK(e.fits, "--plan {}{}: {}, more than the {} available ({}); no weight was read", forced,
                chunk_windows > 0 ? fmt::format(" --chunk-windows {}", chunk_windows) : "", plan_needs(e, gpu),
                format_bytes(host_short ? budget.host : budget.device), host_short ? budget.host_source : budget.device_source);
    return e;
  }
  std::vector<PlanEstimate> plans = estimate_plans(inputs, budget);
  if (chunk_windows > 0)
    for (auto& p : plans) p = estimate(inputs, budget, p.plan.name, p.plan.name == "resident" ? 0 : chunk_windows);
  for (const PlanEstimate& p : plans)
    if (p.fits) return p;
  std::string needs;
  for (const PlanEstimate& p : plans) needs += (needs.empty() ? "" : "; ") + plan_needs(p, gpu);
  const PlanEstimate& smallest = plans.back();
  fail("no evaluation plan fits in the memory available: {} available ({}){}; {} (the smallest: streamed, one "
       "batch of {} window(s) of {} tokens at a time). Lower --batch-size or --seq-len, evaluate fewer schemes at once, "
       "or raise --max-memory; no weight was read",
       format_bytes(budget.host), budget.host_source,
       gpu ? fmt::format(", {} on the device ({})", format_bytes(budget.device), budget.device_source) : "", needs,
       smallest.plan.chunk_windows, inputs.seq_len);
}

std::string describe(const PlanEstimate& e, const MemoryBudget& budget) {
  const std::string chunk = e.plan.name == "resident"
                                ? fmt::format("batches of {} window(s), every layer kept", e.plan.chunk_windows)
                                : fmt::format("chunks of {} window(s), {}", e.plan.chunk_windows,
                                              e.plan.keep_full_blocks ? "full precision kept, each scheme's layers built per chunk"
                                                                      : "each layer read from the checkpoint per chunk");
  std::string line = fmt::format("plan: {}, {}; peak ~{} of {} ({})", e.plan.name, chunk, format_size(e.host_bytes),
                                 format_bytes(budget.host), budget.host_source);
  if (e.device_bytes > 0)
    line += fmt::format("; device ~{} of {} ({})", format_size(e.device_bytes), format_bytes(budget.device), budget.device_source);
  return line;
}

nlohmann::json plan_record(const PlanEstimate& e, const MemoryBudget& budget) {
  nlohmann::json j = {{"name", e.plan.name},
                      {"chunk_windows", e.plan.chunk_windows},
                      {"keep_full_blocks", e.plan.keep_full_blocks},
                      {"keep_scheme_blocks", e.plan.keep_scheme_blocks},
                      {"prefetch_next_layer", e.plan.prefetch_next_layer},
                      {"release_memory_per_layer", e.plan.release_memory_per_layer},
                      {"estimated_peak_host_bytes", e.host_bytes},
                      {"host_budget_bytes", budget.host},
                      {"host_budget_source", budget.host_source},
                      {"breakdown", e.breakdown},
                      {"note", "results do not depend on the plan (DESIGN.md §11)"}};
  if (e.device_bytes > 0) {
    j["estimated_peak_device_bytes"] = e.device_bytes;
    j["device_budget_bytes"] = budget.device;
    j["device_budget_source"] = budget.device_source;
  }
  return j;
}

}  // namespace qeval
