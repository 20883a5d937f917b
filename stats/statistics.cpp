#include "stats/statistics.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <set>

#include <fmt/core.h>

#include "common/error.h"
#include "common/json_integer.h"
#include "kernels/attention_statistics.h"
#include "stats/implicit_attention.h"

namespace qeval {
namespace {

using nlohmann::json;

// JSON has no NaN or infinity; the state spells them as strings so they read back exactly.
json number_to_json(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

double number_from_json(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  fail("expected a number, \"nan\", \"inf\" or \"-inf\", found {}", j.dump());
}

constexpr const char* kStateFormat = "qeval-statistics-state";
constexpr int kStateVersion = 1;

}  // namespace

StatisticsCollector::StatisticsCollector(StatisticsOptions options) : options_(options) {
  QEVAL_CHECK(options_.sink_T >= 1, "StatisticsCollector: sink T must be at least 1, got {}", options_.sink_T);
  QEVAL_CHECK(std::isfinite(options_.sink_eps), "StatisticsCollector: sink epsilon must be finite, got {}",
              options_.sink_eps);
}

void StatisticsCollector::begin_batch(std::vector<std::int64_t> window_indices) {
  std::set<std::int64_t> seen;
  for (std::int64_t w : window_indices) {
    QEVAL_CHECK(w >= 0, "StatisticsCollector::begin_batch: window index {} is negative", w);
    QEVAL_CHECK(seen.insert(w).second, "StatisticsCollector::begin_batch: window {} appears twice in one batch", w);
  }
  // A layer-major evaluation names the same batch again before each layer: windows already seen
  // continue (on_block_output checks that each gets its layers in order, once each).
  for (std::int64_t w : window_indices) windows_.emplace(w, WindowRecord{});
  batch_ = std::move(window_indices);
}

StatisticsCollector::WindowRecord& StatisticsCollector::batch_row(std::size_t row) { return windows_.at(batch_[row]); }

bool StatisticsCollector::fused_enabled() const {
  static const bool allowed = [] {
    const char* v = std::getenv("QEVAL_FUSED_STATISTICS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return options_.fused && allowed;
}

std::int64_t StatisticsCollector::window_of(std::int64_t layer) const {
  const auto& windows = options_.attention_windows;
  return layer < static_cast<std::int64_t>(windows.size()) ? windows[static_cast<std::size_t>(layer)] : 0;
}

void StatisticsCollector::on_block_output(std::int64_t layer, const at::Tensor& hidden) {
  QEVAL_CHECK(hidden.dim() == 3 && hidden.size(0) == static_cast<std::int64_t>(batch_.size()),
              "StatisticsCollector: hidden state of layer {} must be [B, L, D] with B = {} (begin_batch), got {} dims "
              "and B = {}",
              layer, batch_.size(), hidden.dim(), hidden.dim() > 0 ? hidden.size(0) : 0);
  const bool fused = fused_enabled() && kernels::hidden_stats_unsupported(hidden).empty();
  std::vector<HiddenLayerStats> stats =
      fused ? hidden_layer_stats_from_device(kernels::hidden_stats(hidden)) : hidden_layer_stats(hidden);
  (fused ? paths_.hidden_fused : paths_.hidden_unfused) += static_cast<std::int64_t>(batch_.size());
  for (std::size_t row = 0; row < batch_.size(); ++row) {
    WindowRecord& rec = batch_row(row);
    QEVAL_CHECK(layer == static_cast<std::int64_t>(rec.hidden.size()),
                "StatisticsCollector: window {} expected the hidden state of layer {} next, got layer {}", batch_[row],
                rec.hidden.size(), layer);
    if (rec.length == 0) rec.length = hidden.size(1);
    QEVAL_CHECK(rec.length == hidden.size(1), "StatisticsCollector: window {} has length {}, layer {} has {} positions",
                batch_[row], rec.length, layer, hidden.size(1));
    rec.hidden.push_back(stats[row]);
  }
}

namespace {

bool is_attention(const StatisticsOptions& o, std::int64_t layer) { return o.mixer(layer) == MixerKind::attention; }
bool is_ssm(const StatisticsOptions& o, std::int64_t layer) {
  return o.mixer(layer) == MixerKind::mamba || o.mixer(layer) == MixerKind::mamba2;
}
bool is_moe(const StatisticsOptions& o, std::int64_t layer) { return o.ffn(layer) == FfnKind::moe; }

// How many layers before `layer` are of the kind.
std::int64_t ordinal(const StatisticsOptions& o, bool (*pick)(const StatisticsOptions&, std::int64_t), std::int64_t layer) {
  std::int64_t n = 0;
  for (std::int64_t l = 0; l < layer; ++l) n += pick(o, l) ? 1 : 0;
  return n;
}

}  // namespace

std::vector<std::int64_t> StatisticsCollector::layers_where(bool (*pick)(const StatisticsOptions&, std::int64_t),
                                                            std::int64_t M) const {
  std::vector<std::int64_t> out;
  for (std::int64_t l = 0; l < M; ++l)
    if (pick(options_, l)) out.push_back(l);
  return out;
}

void StatisticsCollector::add_attention(std::vector<AttentionLayerStats> WindowRecord::*field, std::int64_t layer,
                                        std::int64_t index, const at::Tensor& probs, const char* what) {
  QEVAL_CHECK(options_.attention,
              "StatisticsCollector: {} of layer {} handed over, but attention statistics are off", what, layer);
  QEVAL_CHECK(probs.dim() == 4 && probs.size(0) == static_cast<std::int64_t>(batch_.size()),
              "StatisticsCollector: {} of layer {} must be [B, H, L, L] with B = {} (begin_batch), got {} dims "
              "and B = {}",
              what, layer, batch_.size(), probs.dim(), probs.dim() > 0 ? probs.size(0) : 0);
  const auto& windows = options_.attention_windows;
  const bool real = field == &WindowRecord::attention;  // sliding windows concern real attention only
  const std::int64_t window =
      real && layer < static_cast<std::int64_t>(windows.size()) ? windows[static_cast<std::size_t>(layer)] : 0;
  store_attention(field, layer, index, probs.size(2),
                  attention_layer_stats(probs, options_.sink_T, options_.sink_eps, /*chunk_elements: by device*/ 0, window),
                  what);
  if (real) paths_.attention_unfused += static_cast<std::int64_t>(batch_.size());
}

void StatisticsCollector::store_attention(std::vector<AttentionLayerStats> WindowRecord::*field, std::int64_t layer,
                                          std::int64_t index, std::int64_t length,
                                          const std::vector<AttentionLayerStats>& stats, const char* what) {
  for (std::size_t row = 0; row < batch_.size(); ++row) {
    WindowRecord& rec = batch_row(row);
    std::vector<AttentionLayerStats>& list = rec.*field;
    QEVAL_CHECK(index == static_cast<std::int64_t>(list.size()),
                "StatisticsCollector: window {} expected the {} of layer kind ordinal {} next, got layer {}", batch_[row],
                what, list.size(), layer);
    if (rec.length == 0) rec.length = length;
    QEVAL_CHECK(rec.length == length, "StatisticsCollector: window {} has length {}, {} of layer {} has {}",
                batch_[row], rec.length, what, layer, length);
    list.push_back(stats[row]);
  }
}

void StatisticsCollector::on_attention(std::int64_t layer, const at::Tensor& probs) {
  QEVAL_CHECK(is_attention(options_, layer), "StatisticsCollector: attention handed over for layer {}, which is a {} layer",
              layer, to_string(options_.mixer(layer)));
  add_attention(&WindowRecord::attention, layer, ordinal(options_, is_attention, layer), probs, "attention");
}

bool StatisticsCollector::wants_attention_sums(std::int64_t layer, AttentionSumsRequest* request) const {
  if (!options_.attention || !is_attention(options_, layer) || !fused_enabled()) return false;
  request->sink_T = options_.sink_T;
  request->window = window_of(layer);
  return true;
}

void StatisticsCollector::on_attention_sums(std::int64_t layer, const AttentionSums& sums) {
  QEVAL_CHECK(options_.attention,
              "StatisticsCollector: attention sums of layer {} handed over, but attention statistics are off", layer);
  QEVAL_CHECK(is_attention(options_, layer),
              "StatisticsCollector: attention sums handed over for layer {}, which is a {} layer", layer,
              to_string(options_.mixer(layer)));
  QEVAL_CHECK(sums.sums.dim() == 3 && sums.sums.size(0) == static_cast<std::int64_t>(batch_.size()),
              "StatisticsCollector: attention sums of layer {} must be [B, H, 4] with B = {} (begin_batch), got {} dims",
              layer, batch_.size(), sums.sums.dim());
  QEVAL_CHECK(sums.sink_T == options_.sink_T && sums.window == window_of(layer),
              "StatisticsCollector: attention sums of layer {} were reduced with sink T {} and window {}, expected {} and {}",
              layer, sums.sink_T, sums.window, options_.sink_T, window_of(layer));
  store_attention(&WindowRecord::attention, layer, ordinal(options_, is_attention, layer), sums.length,
                  attention_layer_stats_from_sums(sums.sums, sums.length, sums.window, sums.sink_T, options_.sink_eps),
                  "attention");
  paths_.attention_fused += static_cast<std::int64_t>(batch_.size());
}

SsmSelection StatisticsCollector::measured_channels(const SsmSelection& s) const {
  const std::int64_t E = s.delta.size(2), K = options_.mamba_channels;
  if (s.kind != SsmSelection::Kind::mamba || K <= 0 || K >= E) return s;
  const at::Tensor picked =
      at::arange(K, s.delta.options().dtype(at::kLong)).mul_(E).div_(K, "floor");  // ⌊k E / K⌋, k < K
  return {s.kind, s.delta.index_select(2, picked), s.A.index_select(0, picked), s.Bm, s.Cm};
}

void StatisticsCollector::on_ssm_selection(std::int64_t layer, const SsmSelection& selection) {
  QEVAL_CHECK(is_ssm(options_, layer),
              "StatisticsCollector: a state-space selection handed over for layer {}, which is a {} layer", layer,
              to_string(options_.mixer(layer)));
  const MixerKind kind = selection.kind == SsmSelection::Kind::mamba2 ? MixerKind::mamba2 : MixerKind::mamba;
  QEVAL_CHECK(kind == options_.mixer(layer), "StatisticsCollector: layer {} is a {} layer, its selection says {}", layer,
              to_string(options_.mixer(layer)), to_string(kind));
  QEVAL_CHECK(selection.delta.dim() == 3 && selection.delta.size(0) == static_cast<std::int64_t>(batch_.size()),
              "StatisticsCollector: the time steps of layer {} must be [B, L, C] with B = {} (begin_batch)", layer,
              batch_.size());
  const std::int64_t index = ordinal(options_, is_ssm, layer), length = selection.delta.size(1);
  if (options_.attention)
    store_attention(&WindowRecord::implicit, layer, index, length,
                    implicit_attention_stats(measured_channels(selection), options_.sink_T, options_.sink_eps),
                    "implicit attention");
  const std::vector<double> entropy = selection_entropy(selection.delta);
  for (std::size_t row = 0; row < batch_.size(); ++row) {
    WindowRecord& rec = batch_row(row);
    QEVAL_CHECK(index == static_cast<std::int64_t>(rec.selection.size()),
                "StatisticsCollector: window {} expected the selection of state-space ordinal {} next, got layer {}",
                batch_[row], rec.selection.size(), layer);
    rec.selection.push_back(entropy[row]);
  }
}

void StatisticsCollector::on_router(std::int64_t layer, const at::Tensor& probs, const at::Tensor& selected) {
  QEVAL_CHECK(is_moe(options_, layer) && options_.experts > 0,
              "StatisticsCollector: router of layer {} handed over, but the layer is not a mixture-of-experts layer", layer);
  QEVAL_CHECK(probs.dim() == 3 && probs.size(0) == static_cast<std::int64_t>(batch_.size()) &&
                  probs.size(2) == options_.experts && selected.dim() == 3,
              "StatisticsCollector: router of layer {} must be [B = {}, L, E = {}] with choices [B, L, k]", layer,
              batch_.size(), options_.experts);
  const std::int64_t index = ordinal(options_, is_moe, layer);
  const at::Tensor p = probs.detach().to(at::kCPU, at::kDouble);
  const at::Tensor entropy = -(p * p.clamp_min(std::numeric_limits<double>::min()).log()).sum(-1);  // [B, L]
  const at::Tensor choices = selected.detach().to(at::kCPU, at::kLong);
  for (std::size_t row = 0; row < batch_.size(); ++row) {
    WindowRecord& rec = batch_row(row);
    QEVAL_CHECK(index == static_cast<std::int64_t>(rec.router.size()),
                "StatisticsCollector: window {} expected router ordinal {} next, got layer {}", batch_[row],
                rec.router.size(), layer);
    const auto b = static_cast<std::int64_t>(row);
    const at::Tensor counts = at::bincount(choices[b].reshape({-1}), {}, options_.experts).contiguous();
    RouterLayerStats r;
    r.counts.assign(counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + options_.experts);
    // Positions in order, so the sum's bits do not depend on the batch.
    const at::Tensor e = entropy[b].contiguous();
    for (std::int64_t t = 0; t < e.size(0); ++t) r.entropy_sum += e.data_ptr<double>()[t];
    r.tokens = e.size(0);
    rec.router.push_back(std::move(r));
  }
}

void StatisticsCollector::merge(const StatisticsCollector& other) {
  QEVAL_CHECK(options_.attention == other.options_.attention && options_.sink_T == other.options_.sink_T &&
                  options_.mamba_channels == other.options_.mamba_channels &&
                  options_.sink_eps == other.options_.sink_eps &&
                  options_.attention_windows == other.options_.attention_windows &&
                  options_.same_layers(other.options_),
              "StatisticsCollector::merge: options differ (attention {} vs {}, sink T {} vs {}, sink eps {} vs {}, or "
              "the attention windows)",
              options_.attention, other.options_.attention, options_.sink_T, other.options_.sink_T, options_.sink_eps,
              other.options_.sink_eps);
  for (const auto& entry : other.windows_)
    QEVAL_CHECK(windows_.count(entry.first) == 0, "StatisticsCollector::merge: window {} is in both collectors",
                entry.first);
  for (const auto& entry : other.windows_) windows_.insert(entry);
  paths_.attention_fused += other.paths_.attention_fused;
  paths_.attention_unfused += other.paths_.attention_unfused;
  paths_.hidden_fused += other.paths_.hidden_fused;
  paths_.hidden_unfused += other.paths_.hidden_unfused;
}

json StatisticsCollector::options_json() const {
  json o = {{"attention", options_.attention}, {"sink_T", options_.sink_T}, {"sink_eps", options_.sink_eps}};
  if (!options_.attention_windows.empty()) o["attention_windows"] = options_.attention_windows;  // absent: all global
  if (options_.mamba_channels > 0) o["mamba_channels"] = options_.mamba_channels;
  if (!options_.layer_mixers.empty()) {
    std::vector<std::string> names;
    for (MixerKind k : options_.layer_mixers) names.push_back(to_string(k));
    o["layer_mixers"] = names;
  }
  if (!options_.layer_ffns.empty()) {
    std::vector<std::string> names;
    for (FfnKind k : options_.layer_ffns) names.push_back(to_string(k));
    o["layer_ffns"] = names;
    o["experts"] = options_.experts;
  }
  return o;
}

json StatisticsCollector::summary() const {
  QEVAL_CHECK(!windows_.empty(), "StatisticsCollector::summary: no window was observed");
  const std::size_t M = windows_.begin()->second.hidden.size();
  QEVAL_CHECK(M > 0, "StatisticsCollector::summary: window {} has no hidden states", windows_.begin()->first);
  const auto Ms = static_cast<std::int64_t>(M);
  const std::vector<std::int64_t> attention_layers = layers_where(is_attention, Ms);
  const std::vector<std::int64_t> ssm_layers = layers_where(is_ssm, Ms);
  const std::vector<std::int64_t> moe_layers = layers_where(is_moe, Ms);
  std::size_t n_rest = 0;
  std::int64_t min_length = std::numeric_limits<std::int64_t>::max();
  for (const auto& [index, rec] : windows_) {
    QEVAL_CHECK(rec.hidden.size() == M,
                "StatisticsCollector::summary: window {} has {} layers of hidden states, window {} has {}", index,
                rec.hidden.size(), windows_.begin()->first, M);
    QEVAL_CHECK(rec.attention.size() == (options_.attention ? attention_layers.size() : 0) &&
                    rec.implicit.size() == (options_.attention ? ssm_layers.size() : 0) &&
                    rec.selection.size() == ssm_layers.size(),
                "StatisticsCollector::summary: window {} has attention for {} of {} attention layers, implicit "
                "attention for {} and selection for {} of {} state-space layers",
                index, rec.attention.size(), attention_layers.size(), rec.implicit.size(), rec.selection.size(),
                ssm_layers.size());
    QEVAL_CHECK(rec.router.size() == moe_layers.size(),
                "StatisticsCollector::summary: window {} has router statistics for {} of {} mixture-of-experts layers",
                index, rec.router.size(), moe_layers.size());
    if (rec.length >= 2) ++n_rest;
    min_length = std::min(min_length, rec.length);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();

  // Mean over windows (ascending index) per layer, then the mean of those over layers.
  struct Averaged {
    std::vector<double> per_layer;
    double overall;
  };
  auto average_over = [&](std::size_t K, bool rest_only, const std::function<double(const WindowRecord&, std::size_t)>& value,
                          double scale) {
    Averaged out{std::vector<double>(K, nan), nan};
    const std::size_t n = rest_only ? n_rest : windows_.size();
    if (n == 0 || K == 0) return out;
    double over_layers = 0;
    for (std::size_t m = 0; m < K; ++m) {
      double sum = 0;
      for (const auto& entry : windows_)
        if (!rest_only || entry.second.length >= 2) sum += value(entry.second, m);
      out.per_layer[m] = scale * (sum / static_cast<double>(n));
      over_layers += out.per_layer[m];
    }
    out.overall = over_layers / static_cast<double>(K);
    return out;
  };
  auto average = [&](bool rest_only, const std::function<double(const WindowRecord&, std::size_t)>& value,
                     double scale) { return average_over(M, rest_only, value, scale); };
  auto first_rest = [&](double HiddenLayerStats::*first, double HiddenLayerStats::*rest) {
    Averaged f = average(
        false, [&](const WindowRecord& r, std::size_t m) { return r.hidden[m].*first; }, 1.0);
    Averaged s = average(
        true, [&](const WindowRecord& r, std::size_t m) { return r.hidden[m].*rest; }, 1.0);
    return json{
        {"first", f.overall}, {"rest", s.overall}, {"per_layer", {{"first", f.per_layer}, {"rest", s.per_layer}}}};
  };

  json hidden;
  hidden["kurtosis"] = first_rest(&HiddenLayerStats::kurtosis_first, &HiddenLayerStats::kurtosis_rest);
  hidden["max_abs"] = first_rest(&HiddenLayerStats::max_abs_first, &HiddenLayerStats::max_abs_rest);
  hidden["inf_over_l2"] = first_rest(&HiddenLayerStats::inf_over_l2_first, &HiddenLayerStats::inf_over_l2_rest);
  json largest = json::array();
  for (std::size_t m = 0; m < M; ++m) {
    const HiddenLayerStats* best = nullptr;
    std::int64_t best_window = -1;
    for (const auto& [index, rec] : windows_)
      if (best == nullptr || std::abs(rec.hidden[m].largest_value) > std::abs(best->largest_value)) {
        best = &rec.hidden[m];
        best_window = index;
      }
    largest.push_back({{"value", best->largest_value},
                       {"abs", std::abs(best->largest_value)},
                       {"channel", best->largest_channel},
                       {"window", best_window},
                       {"position", best->largest_position}});
  }
  hidden["largest_per_layer"] = largest;

  auto path = [](std::int64_t fused, std::int64_t unfused) {
    return fused > 0 && unfused > 0 ? "fused-cuda and unfused" : fused > 0 ? "fused-cuda" : "unfused";
  };
  json out{{"windows", windows_.size()},
           {"layers", M},
           {"hidden", hidden},
           {"hidden_statistics", path(paths_.hidden_fused, paths_.hidden_unfused)}};
  // The attention statistics of one list of layers (real attention, or state-space layers' implicit one).
  auto attention_section = [&](std::vector<AttentionLayerStats> WindowRecord::*field, std::size_t K) {
    auto stat = [&](double AttentionLayerStats::*member) {
      return [field, member](const WindowRecord& r, std::size_t m) { return (r.*field)[m].*member; };
    };
    Averaged first_attn = average_over(K, true, stat(&AttentionLayerStats::first_attn), 100.0);
    Averaged share = average_over(K, true, stat(&AttentionLayerStats::first_share), 1.0);
    Averaged sink = average_over(K, false, stat(&AttentionLayerStats::sink_fraction), 100.0);
    Averaged entropy = average_over(K, false, stat(&AttentionLayerStats::entropy), 1.0);
    return json{
        {"first_attn_pct", first_attn.overall},
        {"first_token_share", share.overall},
        {"sink_rate_pct", sink.overall},
        {"sink_T", std::min(options_.sink_T, min_length)},
        {"sink_T_requested", options_.sink_T},
        {"sink_eps", options_.sink_eps},
        {"entropy", entropy.overall},
        {"entropy_per_layer", entropy.per_layer},
        {"per_layer",
         {{"first_attn_pct", first_attn.per_layer},
          {"first_token_share", share.per_layer},
          {"sink_rate_pct", sink.per_layer}}},
        {"first_attn_ties", "split"},
    };
  };
  const bool all_attention = attention_layers.size() == M;
  if (options_.attention && !attention_layers.empty()) {
    out["attention_statistics"] = path(paths_.attention_fused, paths_.attention_unfused);
    out["attention"] = attention_section(&WindowRecord::attention, attention_layers.size());
    out["attention"]["weights"] = "as produced; softmax-1 rows sum to less than 1";
    if (!all_attention) out["attention"]["layers"] = attention_layers;
    if (!options_.attention_windows.empty()) {
      out["attention"]["attention_windows"] = options_.attention_windows;
      out["attention"]["sliding_window_layers"] =
          "a layer with window w > 0 counts, for first_attn, first_token_share and the sink rate, only the queries "
          "whose window contains key 1 (positions 1..min(L, w)); its sink T' is min(T, L, w)";
    }
  }
  if (options_.attention && !ssm_layers.empty()) {
    json implicit = attention_section(&WindowRecord::implicit, ssm_layers.size());
    implicit["layers"] = ssm_layers;
    bool has_mamba = false;
    for (std::int64_t l : ssm_layers) has_mamba = has_mamba || options_.mixer(l) == MixerKind::mamba;
    if (options_.mamba_channels > 0 && has_mamba)
      implicit["mamba_channels"] = fmt::format(
          "Mamba (S6) layers measured on {} evenly spaced d_inner channels c_k = floor(k E / {}) (all when E is at most {})",
          options_.mamba_channels, options_.mamba_channels, options_.mamba_channels);
    implicit["weights"] =
        "state-space layers' implicit attention, W[h, i, j] = |a[h, i, j]| / sum_j' |a[h, i, j']| (the D skip term "
        "left out): Mamba (Ali et al. 2024), heads the d_inner channels c, a_c[i, j] = sum_n C_i[n] "
        "exp(sum_{k=j+1..i} dt_k[c] A[c, n]) dt_j[c] B_j[n]; Mamba-2, heads the SSM heads, a_h[i, j] = (C_i . B_j) "
        "exp(sum_{k=j+1..i} dt_k[h] A_h) dt_j[h] (the SSD duality's M = L o (C B^T))";
    out["implicit_attention"] = implicit;
  }
  if (!ssm_layers.empty()) {
    Averaged selection = average_over(ssm_layers.size(), false,
                                      [](const WindowRecord& r, std::size_t m) { return r.selection[m]; }, 1.0);
    out["selection"] = {
        {"layers", ssm_layers},
        {"entropy", selection.overall},
        {"entropy_per_layer", selection.per_layer},
        {"entropy_max", std::log(static_cast<double>(min_length))},
        {"definition",
         "SAMBA's selection entropy (Ren et al. 2024, appendix C): per channel c (Mamba: d_inner channels; Mamba-2: "
         "heads), the time steps dt (after softplus) normalised over the window's positions, S[i, c] = dt[i, c] / "
         "sum_i' dt[i', c], entropy -sum_i S log S (nats), averaged over channels; entropy_max = log L (dt constant "
         "in time)"}};
  }
  if (!moe_layers.empty()) {
    const std::size_t E = static_cast<std::size_t>(options_.experts);
    json tokens = json::array(), load = json::array(), load_entropy = json::array(), token_entropy = json::array();
    double sum_load_entropy = 0, sum_token_entropy = 0;
    for (std::size_t m = 0; m < moe_layers.size(); ++m) {
      std::vector<std::int64_t> counts(E, 0);
      double entropy_sum = 0;
      std::int64_t n_tokens = 0, choices = 0;
      for (const auto& [index, rec] : windows_) {
        for (std::size_t e = 0; e < E; ++e) counts[e] += rec.router[m].counts[e];
        entropy_sum += rec.router[m].entropy_sum;
        n_tokens += rec.router[m].tokens;
      }
      for (std::int64_t n : counts) choices += n;
      std::vector<double> fractions(E, 0.0);
      double h = 0;
      for (std::size_t e = 0; e < E; ++e) {
        fractions[e] = choices > 0 ? static_cast<double>(counts[e]) / static_cast<double>(choices) : nan;
        if (fractions[e] > 0) h -= fractions[e] * std::log(fractions[e]);
      }
      const double te = n_tokens > 0 ? entropy_sum / static_cast<double>(n_tokens) : nan;
      tokens.push_back(counts);
      load.push_back(fractions);
      load_entropy.push_back(h);
      token_entropy.push_back(te);
      sum_load_entropy += h;
      sum_token_entropy += te;
    }
    const double K = static_cast<double>(moe_layers.size());
    out["router"] = {{"layers", moe_layers},
                     {"experts", options_.experts},
                     {"tokens_per_expert", tokens},
                     {"load", load},
                     {"load_entropy", load_entropy},
                     {"load_entropy_max", std::log(static_cast<double>(E))},
                     {"token_entropy", token_entropy},
                     {"mean_load_entropy", sum_load_entropy / K},
                     {"mean_token_entropy", sum_token_entropy / K},
                     {"definition",
                      "tokens_per_expert: (token, choice) pairs routed to each expert over all windows; load: their "
                      "fractions; load_entropy: -sum_e load log load (nats); token_entropy: mean over tokens of the "
                      "router softmax's entropy (nats)"}};
  }
  return out;
}

json StatisticsCollector::state_to_json() const {
  json windows = json::array();
  for (const auto& [index, rec] : windows_) {
    json hidden = json::array(), attention = json::array(), implicit = json::array(), router = json::array();
    for (const HiddenLayerStats& s : rec.hidden)
      hidden.push_back({number_to_json(s.kurtosis_first), number_to_json(s.kurtosis_rest),
                        number_to_json(s.max_abs_first), number_to_json(s.max_abs_rest),
                        number_to_json(s.inf_over_l2_first), number_to_json(s.inf_over_l2_rest),
                        number_to_json(s.largest_value), s.largest_channel, s.largest_position});
    for (const AttentionLayerStats& s : rec.attention)
      attention.push_back({number_to_json(s.first_attn), number_to_json(s.first_share), number_to_json(s.sink_fraction),
                           number_to_json(s.entropy)});
    for (const AttentionLayerStats& s : rec.implicit)
      implicit.push_back({number_to_json(s.first_attn), number_to_json(s.first_share), number_to_json(s.sink_fraction),
                          number_to_json(s.entropy)});
    for (const RouterLayerStats& r : rec.router)
      router.push_back({{"counts", r.counts}, {"entropy_sum", number_to_json(r.entropy_sum)}, {"tokens", r.tokens}});
    json w{{"index", index}, {"length", rec.length}, {"hidden", hidden}, {"attention", attention}};
    if (!implicit.empty()) w["implicit_attention"] = implicit;
    if (!rec.selection.empty()) {
      json selection = json::array();
      for (double e : rec.selection) selection.push_back(number_to_json(e));
      w["selection"] = selection;
    }
    if (!router.empty()) w["router"] = router;
    windows.push_back(std::move(w));
  }
  return {
      {"format", kStateFormat},
      {"version", kStateVersion},
      {"options", options_json()},
      {"hidden_fields",
       {"kurtosis_first", "kurtosis_rest", "max_abs_first", "max_abs_rest", "inf_over_l2_first", "inf_over_l2_rest",
        "largest_value", "largest_channel", "largest_position"}},
      {"attention_fields", {"first_attn", "first_share", "sink_fraction", "entropy"}},
      {"paths",
       {{"attention_fused", paths_.attention_fused},
        {"attention_unfused", paths_.attention_unfused},
        {"hidden_fused", paths_.hidden_fused},
        {"hidden_unfused", paths_.hidden_unfused}}},
      {"windows", windows}};
}

StatisticsCollector StatisticsCollector::state_from_json(const json& state, const std::string& source) {
  try {
    QEVAL_CHECK(state.at("format") == kStateFormat, "format is {}, expected \"{}\"", state.at("format").dump(),
                kStateFormat);
    QEVAL_CHECK(state.at("version") == kStateVersion, "version is {}, expected {}", state.at("version").dump(),
                kStateVersion);
    const json& o = state.at("options");
    StatisticsOptions options;
    options.attention = o.at("attention").get<bool>();
    options.sink_T = json_integer(o.at("sink_T"), "sink_T");
    options.sink_eps = o.at("sink_eps").get<double>();
    if (o.contains("attention_windows"))
      for (const json& w : o.at("attention_windows")) options.attention_windows.push_back(json_integer(w, "attention window"));
    if (o.contains("layer_mixers"))
      for (const json& k : o.at("layer_mixers")) options.layer_mixers.push_back(parse_mixer(k.get<std::string>()));
    if (o.contains("layer_ffns"))
      for (const json& k : o.at("layer_ffns")) options.layer_ffns.push_back(parse_ffn(k.get<std::string>()));
    if (o.contains("experts")) options.experts = json_integer(o.at("experts"), "experts");
    if (o.contains("mamba_channels")) options.mamba_channels = json_integer(o.at("mamba_channels"), "mamba_channels");
    StatisticsCollector c(options);
    for (const json& w : state.at("windows")) {
      const std::int64_t index = json_integer(w.at("index"), "window index");
      QEVAL_CHECK(index >= 0 && c.windows_.count(index) == 0, "window index {} is negative or repeated", index);
      WindowRecord rec;
      rec.length = json_integer(w.at("length"), "window length");
      QEVAL_CHECK(rec.length >= 0, "window {} has length {}", index, rec.length);
      for (const json& h : w.at("hidden")) {
        QEVAL_CHECK(h.is_array() && h.size() == 9, "window {}: a hidden entry must hold 9 values, found {}", index,
                    h.dump());
        rec.hidden.push_back({number_from_json(h[0]), number_from_json(h[1]), number_from_json(h[2]),
                              number_from_json(h[3]), number_from_json(h[4]), number_from_json(h[5]),
                              number_from_json(h[6]), json_integer(h[7], "a hidden entry's count"), json_integer(h[8], "a hidden entry's count")});
      }
      for (const json& a : w.at("attention")) {
        QEVAL_CHECK(a.is_array() && a.size() == 4, "window {}: an attention entry must hold 4 values, found {}", index,
                    a.dump());
        rec.attention.push_back(
            {number_from_json(a[0]), number_from_json(a[1]), number_from_json(a[2]), number_from_json(a[3])});
      }
      if (w.contains("implicit_attention"))
        for (const json& a : w.at("implicit_attention")) {
          QEVAL_CHECK(a.is_array() && a.size() == 4, "window {}: an implicit attention entry must hold 4 values", index);
          rec.implicit.push_back(
              {number_from_json(a[0]), number_from_json(a[1]), number_from_json(a[2]), number_from_json(a[3])});
        }
      if (w.contains("selection"))
        for (const json& e : w.at("selection")) rec.selection.push_back(number_from_json(e));
      if (w.contains("router"))
        for (const json& r : w.at("router")) {
          RouterLayerStats stats;
          for (const json& n : r.at("counts")) stats.counts.push_back(json_integer(n, "a router count"));
          stats.entropy_sum = number_from_json(r.at("entropy_sum"));
          stats.tokens = json_integer(r.at("tokens"), "router tokens");
          rec.router.push_back(std::move(stats));
        }
      // States written before issue 54 lack what state-space layers now record.
      bool has_ssm = false;
      for (std::size_t l = 0; l < rec.hidden.size(); ++l) has_ssm = has_ssm || is_ssm(options, static_cast<std::int64_t>(l));
      QEVAL_CHECK(!has_ssm || !rec.selection.empty(),
                  "window {} has no selection entropies of its state-space layers: the state was written by a qeval "
                  "that did not measure them; evaluate again without resuming from it",
                  index);
      c.windows_.emplace(index, std::move(rec));
    }
    if (state.contains("paths")) {  // absent in states written before issue 43
      const json& p = state.at("paths");
      c.paths_.attention_fused = json_integer(p.at("attention_fused"), "a path count");
      c.paths_.attention_unfused = json_integer(p.at("attention_unfused"), "a path count");
      c.paths_.hidden_fused = json_integer(p.at("hidden_fused"), "a path count");
      c.paths_.hidden_unfused = json_integer(p.at("hidden_unfused"), "a path count");
    }
    return c;
  } catch (const json::exception& e) {
    fail("{}: statistics state is malformed: {}", source, e.what());
  } catch (const Error& e) {
    fail("{}: statistics state: {}", source, e.what());
  }
}

}  // namespace qeval
