// StatisticsCollector: outlier and attention statistics streamed through the forward pass
// (DESIGN.md §6), deterministic and mergeable across batches, shards and resumed runs.
//
// Protocol: before each forward the caller names the global window index of every batch row
// (begin_batch); the model then calls on_block_output for layers 0, 1, ... in order and, when
// attention statistics are on, on_attention. The collector keeps a handful of doubles per
// (window, layer) — never activations — and reduces them only when summary() is asked, in
// ascending window-index order. Hence:
//   - the numbers do not depend on the batch size or on the order windows were seen;
//   - collectors over disjoint windows merge() into exactly (bit for bit) what one collector
//     over all of them gives;
//   - state_to_json()/state_from_json() round-trip exactly (doubles are written with the
//     shortest representation that reads back to the same bits), so a killed run resumes.
//
// Definitions, per sequence and layer (details and edge cases in stats/hidden_stats.h and
// stats/attention_stats.h). X[m, l, d]: output of block m after its second residual add, before
// the final norm; A[i, j]: attention weight of query i on key j (1-based), used as produced.
//   kurtosis     κ[m,l] = E_d[(X−μ)^4] / (E_d[(X−μ)^2])^2, μ = E_d[X], population moments, float64
//   max_abs      max_d |X[m,l,d]|
//   inf_over_l2  ‖X[m,l,:]‖∞ / ‖X[m,l,:]‖₂
//   %first-attn  over heads and queries i ≥ 2: fraction whose largest weight is on key 1 (a
//                maximum shared by k causal keys including key 1 counts 1/k)
//   first-token share  mean A[i,1] over the same (head, query)
//   Sink₁^ε      α₁ = (1/T') Σ_{i=1..T'} A[i,1] per head, T' = min(T, L); fraction of heads with α₁ > ε
//   sliding-window layers (window w): the three above count only queries i ≤ w, those whose
//                window holds key 1 (T' = min(T, L, w)); summary "attention_windows" says which
//   entropy      −Σ_j A[i,j] log A[i,j] (0·log 0 = 0, nats), mean over heads and all queries
// For softmax-1 the rows sum to less than 1 and are not renormalised.
// Every per-layer value is the mean over sequences (windows) of the per-sequence value; every
// headline value is the mean over layers of the per-layer values. "first" is position l = 1,
// "rest" the mean over l = 2..L within a sequence; rest, first_attn and first_token_share use
// only windows with L ≥ 2 (null when there are none). NaN (e.g. the kurtosis of a constant
// vector) propagates into the means and prints as null.
//
// summary() (all indices 0-based: layer, channel, window, position):
// {
//   "windows": n, "layers": M,
//   "hidden": {
//     "kurtosis":    {"first": E_m[κ_first], "rest": E_m[κ_rest],
//                     "per_layer": {"first": [M], "rest": [M]}},
//     "max_abs":     {... same layout: max_d |X|},
//     "inf_over_l2": {... same layout: ‖X‖∞ / ‖X‖₂},
//     "largest_per_layer": [M × {"value": signed X, "abs": |X|, "channel": d,
//                                "window": global window index, "position": l − 1}]
//                    (the largest |X| over all windows, positions and channels of that layer;
//                     ties go to the lowest window index)
//   },
//   "attention": {                      (absent when attention statistics are off)
//     "first_attn_pct": %, "first_token_share": fraction in [0, 1], "sink_rate_pct": %,
//     "sink_T": T' used (the smallest over windows: min(T, L)), "sink_T_requested": T,
//     "sink_eps": ε, "entropy": mean over layers (nats), "entropy_per_layer": [M],
//     "per_layer": {"first_attn_pct": [M], "first_token_share": [M], "sink_rate_pct": [M]},
//     "first_attn_ties": "split", "weights": "as produced; softmax-1 rows sum to less than 1"
//   }
// }
// sink_rate_pct is the percentage of (layer, head) pairs with α₁ > ε, averaged over windows.
// Also "hidden_statistics" and (with attention) "attention_statistics": which path measured them,
// "fused-cuda" (reduced on the GPU, kernels/attention_statistics.h), "unfused" (ATen reductions of the
// hidden states and of the [B, H, L, L] probabilities) or "fused-cuda and unfused" (some of each).
//
// Layer kinds (issue 45; StatisticsOptions::layer_mixers / layer_ffns, empty for all-attention
// dense models, whose summaries are unchanged):
//   "attention" covers the attention layers only, and then says which: "layers": [indices]; its
//              per_layer arrays run over those layers.
//   "implicit_attention"  state-space layers (Mamba and Mamba-2): the same statistics of the scan's
//              implicit attention W = |α| / Σ_j |α| (stats/implicit_attention.h: Ali et al.'s hidden
//              attention for Mamba, heads being the d_inner channels; the SSD duality's M = L ∘ (C Bᵀ)
//              for Mamba-2, heads being the SSM heads), computed in blocks, so a hybrid's sink can be
//              compared across mixer kinds; absent without state-space layers or attention statistics.
//   "selection" state-space layers: {"layers": [indices], "entropy": mean over them, "entropy_per_layer",
//              "entropy_max": log L of the shortest window (Δ constant in time), "definition"}: SAMBA's
//              selection entropy of the time steps Δ (stats/implicit_attention.h), collected whenever
//              statistics are (it costs O(L · channels)).
//   "router"   mixture-of-experts layers: {"layers": [indices], "experts": E, "top_k": k,
//              "tokens_per_expert": [per layer: [E] counts of (token, choice) pairs over all windows],
//              "load": [per layer: [E] fractions of the choices], "load_entropy": [per layer: −Σ_e load
//              log load, nats; log E is uniform], "load_entropy_max": log E,
//              "token_entropy": [per layer: mean over tokens of the router softmax's entropy, nats],
//              "mean_load_entropy", "mean_token_entropy": over the MoE layers}. Counts are exact
//              sums over windows, so they merge and resume like the rest.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "stats/attention_stats.h"
#include "stats/hidden_stats.h"
#include "model/config.h"
#include "model/observer.h"

namespace qeval {

struct StatisticsOptions {
  bool attention = true;     // off: wants_attention() is false and the model hands nothing over
  std::int64_t sink_T = 64;  // Sink₁^ε looks at the first min(T, L) queries
  double sink_eps = 0.3;     // Sink₁^ε threshold on α₁
  // The model's attention window per layer (ModelConfig::attention_windows; empty: all global).
  // In a windowed layer only the queries that can see key 1 count (stats/attention_stats.h).
  std::vector<std::int64_t> attention_windows;
  // On a GPU, reduce on the device (kernels/attention_statistics.h): the attention through the fused
  // kernel's per-head sums (on_attention_sums) and the hidden states in one read; false, or
  // QEVAL_FUSED_STATISTICS=0 in the environment: the unfused reductions of the CPU (the [B, H, L, L]
  // probabilities). Not part of the state: both paths measure the same quantities.
  bool fused = true;
  // The model's layer pattern (ModelConfig::layer_mixers / layer_ffns; empty: attention and a
  // dense MLP everywhere): attention statistics come from attention layers, implicit attention
  // and selection from state-space (Mamba, Mamba-2) layers, router statistics from mixture-of-experts layers (`experts` each).
  std::vector<MixerKind> layer_mixers;
  std::vector<FfnKind> layer_ffns;
  std::int64_t experts = 0;
  // Mamba (S6) layers' implicit attention on this many evenly spaced d_inner channels, c_k = ⌊k E / K⌋
  // (0, or K ≥ E: all). Each channel is a head of [L, L]: all of them cost O(E L² N).
  std::int64_t mamba_channels = 0;
  MixerKind mixer(std::int64_t layer) const {
    return layer_mixers.empty() ? MixerKind::attention : layer_mixers[static_cast<std::size_t>(layer)];
  }
  FfnKind ffn(std::int64_t layer) const {
    return layer_ffns.empty() ? FfnKind::dense : layer_ffns[static_cast<std::size_t>(layer)];
  }
  bool same_layers(const StatisticsOptions& o) const {
    return layer_mixers == o.layer_mixers && layer_ffns == o.layer_ffns && experts == o.experts;
  }
};

class StatisticsCollector : public ForwardObserver {
 public:
  explicit StatisticsCollector(StatisticsOptions options = {});

  // Global window index of each row of the next forward's [B, L] batch (distinct, ≥ 0). A window
  // seen before continues where it stopped (layer-major evaluation names a batch again before
  // each layer); each window must receive its layers in order, each once.
  void begin_batch(std::vector<std::int64_t> window_indices);

  void on_block_output(std::int64_t layer, const at::Tensor& hidden) override;  // [B, L, D]
  bool wants_attention(std::int64_t layer) const override {
    return options_.attention && options_.mixer(layer) == MixerKind::attention;
  }
  void on_attention(std::int64_t layer, const at::Tensor& probs) override;  // [B, H, L, L]
  bool wants_attention_sums(std::int64_t layer, AttentionSumsRequest* request) const override;
  void on_attention_sums(std::int64_t layer, const AttentionSums& sums) override;
  bool wants_ssm_selection(std::int64_t layer) const override {
    return options_.mixer(layer) == MixerKind::mamba || options_.mixer(layer) == MixerKind::mamba2;
  }
  void on_ssm_selection(std::int64_t layer, const SsmSelection& selection) override;
  bool wants_router(std::int64_t layer) const override { return options_.ffn(layer) == FfnKind::moe; }
  void on_router(std::int64_t layer, const at::Tensor& probs, const at::Tensor& selected) override;

  // Adds `other`'s windows; throws when the options differ or a window is in both.
  void merge(const StatisticsCollector& other);

  std::int64_t window_count() const { return static_cast<std::int64_t>(windows_.size()); }
  // The windows observed, ascending (a state read back must cover the windows its rows claim).
  std::vector<std::int64_t> window_indices() const {
    std::vector<std::int64_t> out;
    for (const auto& entry : windows_) out.push_back(entry.first);
    return out;
  }
  const StatisticsOptions& options() const { return options_; }

  // The structure above; throws when no window was observed or windows disagree on the layer count.
  nlohmann::json summary() const;

  // Everything needed to continue or merge: options and the per-window, per-layer values.
  // Save between batches: a window whose forward was cut short has too few layers, and
  // summary() refuses it by name.
  nlohmann::json state_to_json() const;
  // `source` names the file (or stream) in errors.
  static StatisticsCollector state_from_json(const nlohmann::json& state, const std::string& source);

 private:
  struct RouterLayerStats {
    std::vector<std::int64_t> counts;  // [E]: (token, choice) pairs routed to each expert
    double entropy_sum = 0;            // Σ over tokens of the router softmax's entropy
    std::int64_t tokens = 0;
  };
  struct WindowRecord {
    std::int64_t length = 0;                     // L; 0 until the first layer arrives
    std::vector<HiddenLayerStats> hidden;        // [layer]
    std::vector<AttentionLayerStats> attention;  // [attention layer], empty when attention is off
    std::vector<AttentionLayerStats> implicit;   // [state-space layer], empty when attention is off
    std::vector<double> selection;               // [state-space layer]: selection entropy
    std::vector<RouterLayerStats> router;        // [mixture-of-experts layer]
  };
  // The layers of a kind, in order, and the position of `layer` among them.
  std::vector<std::int64_t> layers_where(bool (*pick)(const StatisticsOptions&, std::int64_t), std::int64_t M) const;
  void add_attention(std::vector<AttentionLayerStats> WindowRecord::*field, std::int64_t layer, std::int64_t ordinal,
                     const at::Tensor& probs, const char* what);
  WindowRecord& batch_row(std::size_t row);
  SsmSelection measured_channels(const SsmSelection& selection) const;  // StatisticsOptions::mamba_channels
  nlohmann::json options_json() const;

  StatisticsOptions options_;
  std::map<std::int64_t, WindowRecord> windows_;  // ordered: reductions run in ascending index
  std::vector<std::int64_t> batch_;               // window index of each row of the current batch
  // (window, layer) results by path, for the summary's "attention_statistics" / "hidden_statistics".
  struct PathCounts {
    std::int64_t attention_fused = 0, attention_unfused = 0, hidden_fused = 0, hidden_unfused = 0;
  } paths_;
  bool fused_enabled() const;
  std::int64_t window_of(std::int64_t layer) const;
  void store_attention(std::vector<AttentionLayerStats> WindowRecord::*field, std::int64_t layer, std::int64_t ordinal,
                       std::int64_t length, const std::vector<AttentionLayerStats>& stats, const char* what);
};

}  // namespace qeval
