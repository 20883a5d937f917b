#include "transforms/smooth.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "transforms/weight_math.h"

namespace qeval {
namespace {

// SmoothQuant's scales: s_j = a_j^α / w_j^(1−α), both clamped at 1e-5 as the reference code does
// (an all-zero channel gets a finite scale; the value it scales is zero anyway).
at::Tensor smoothing_scales(const at::Tensor& act_max, const at::Tensor& weight_max, double alpha) {
  return at::pow(act_max.clamp_min(1e-5), alpha) / at::pow(weight_max.clamp_min(1e-5), 1.0 - alpha);
}

// max over rows of |W[:, j]| across the given readers (all [*, in]).
at::Tensor column_max_abs(const std::vector<const LinearWeights*>& readers) {
  at::Tensor m;
  for (const LinearWeights* r : readers) {
    at::Tensor c = std::get<0>(f64(r->weight).abs().max(0));
    m = m.defined() ? at::maximum(m, c) : c;
  }
  return m;
}

void scale_columns(LinearWeights& l, const at::Tensor& s) { l.weight = f32(f64(l.weight) * s.unsqueeze(0)); }

// Rows [offset, offset + n) of `l` (weight and bias) divided by s.
void divide_rows(LinearWeights& l, std::int64_t offset, const at::Tensor& s) {
  at::Tensor w = f64(l.weight).clone();
  w.narrow(0, offset, s.size(0)).div_(s.unsqueeze(1));
  l.weight = f32(w);
  if (l.bias.defined()) {
    at::Tensor b = f64(l.bias).clone();
    b.narrow(0, offset, s.size(0)).div_(s);
    l.bias = f32(b);
  }
}

void divide_norm(NormWeights& n, const at::Tensor& s) {
  n.weight = f32(f64(n.weight) / s);
  if (n.bias.defined()) n.bias = f32(f64(n.bias) / s);
}

nlohmann::json layer_entry(const std::string& name, const at::Tensor& s, const at::Tensor& act_max) {
  return {{"name", name},
          {"channels", s.size(0)},
          {"scale_min", s.min().item<double>()},
          {"scale_max", s.max().item<double>()},
          {"act_max_before", act_max.max().item<double>()},
          {"act_max_after", (act_max / s).max().item<double>()}};
}

}  // namespace

nlohmann::json smooth_model(ModelConfig& config, ModelWeights& weights, const SmoothOptions& options,
                            const std::function<at::Tensor(const std::string&)>& input_max_abs) {
  // Experts and state-space mixers read and write the residual stream through layers this transform
  // does not know (routers, convolutions, the scan): refused rather than half-transformed.
  QEVAL_CHECK(config.layer_mixers.empty() && config.layer_ffns.empty(),
              "smooth: models with a layer pattern (mixture-of-experts or state-space layers, here architecture {}) are "
              "not supported",
              config.architecture);
  QEVAL_CHECK(std::isfinite(options.alpha) && options.alpha >= 0 && options.alpha <= 1,
              "smooth: alpha must be in [0, 1], got {}", options.alpha);
  auto wants = [&](const std::string& g) {
    return std::find(options.groups.begin(), options.groups.end(), g) != options.groups.end();
  };
  for (const auto& g : options.groups)
    QEVAL_CHECK(g == "qkv" || g == "up" || g == "down" || g == "o",
                "smooth: unknown group '{}': expected qkv, up, down, o (joined with +)", g);
  nlohmann::json report = {{"name", "smooth"},
                           {"alpha", options.alpha},
                           {"groups", nlohmann::json::array()},
                           {"skipped", nlohmann::json::array()},
                           {"layers", nlohmann::json::array()}};
  auto act = [&](const std::string& name) { return f64(input_max_abs(name)).abs(); };

  if (config.norm == NormKind::rmsnorm_single && (wants("qkv") || wants("up"))) {
    // A per-channel division cannot live in one scalar gain: the same norm with a [D] gain.
    auto widen = [&](NormWeights& n) { n.weight = f32(n.weight.expand({config.d_model})); };
    for (auto& b : weights.blocks) widen(b.attn_norm), widen(b.mlp_norm);
    widen(weights.final_norm);
    config.norm = NormKind::rmsnorm;
    report["norm_widened"] = "rmsnorm_single -> rmsnorm";
  }
  const std::int64_t H = config.n_heads, Hkv = config.n_kv_heads, hd = config.head_dim();
  for (std::size_t i = 0; i < weights.blocks.size(); ++i) {
    BlockWeights& b = weights.blocks[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    if (wants("qkv")) {
      std::vector<LinearWeights*> readers;
      for (LinearWeights* l : {&b.qkv, &b.q, &b.k, &b.v})
        if (l->weight.defined()) readers.push_back(l);
      const at::Tensor a = act(p + (config.fused_qkv ? "attn.qkv" : "attn.q"));
      const at::Tensor s = smoothing_scales(a, column_max_abs({readers.begin(), readers.end()}), options.alpha);
      divide_norm(b.attn_norm, s);
      for (LinearWeights* l : readers) scale_columns(*l, s);
      report["layers"].push_back(layer_entry(p + (config.fused_qkv ? "attn.qkv" : "attn.{q,k,v}"), s, a));
    }
    if (wants("up")) {
      std::vector<LinearWeights*> readers;
      for (LinearWeights* l : {&b.up, &b.gate, &b.gate_up})
        if (l->weight.defined()) readers.push_back(l);
      const std::string reader_name = config.fused_gate_up ? "mlp.gate_up" : "mlp.up";
      const at::Tensor a = act(p + reader_name);
      const at::Tensor s = smoothing_scales(a, column_max_abs({readers.begin(), readers.end()}), options.alpha);
      divide_norm(b.mlp_norm, s);
      for (LinearWeights* l : readers) scale_columns(*l, s);
      report["layers"].push_back(
          layer_entry(p + (config.fused_gate_up ? "mlp.gate_up" : b.gate.weight.defined() ? "mlp.{up,gate}" : "mlp.up"), s, a));
    }
    if (wants("down") && config.gated_mlp()) {
      // down's input is act(gate x) · (up x) (SwiGLU, GeGLU): linear in up's output, so up's rows
      // take 1/s (the second half of a fused gate_up).
      const at::Tensor a = act(p + "mlp.down");
      const at::Tensor s = smoothing_scales(a, column_max_abs({&b.down}), options.alpha);
      if (config.fused_gate_up)
        divide_rows(b.gate_up, config.d_ff, s);
      else
        divide_rows(b.up, 0, s);
      scale_columns(b.down, s);
      report["layers"].push_back(layer_entry(p + "mlp.down", s, a));
    }
    if (wants("o")) {
      // o's input channel h·hd + d is value channel (h / (H / Hkv))·hd + d: one scale per value
      // channel, from the maxima over the o channels that read it.
      const std::int64_t group = H / Hkv;
      const at::Tensor a = act(p + "attn.o").reshape({Hkv, group, hd}).amax(1).reshape({Hkv * hd});
      const at::Tensor w = column_max_abs({&b.o}).reshape({Hkv, group, hd}).amax(1).reshape({Hkv * hd});
      const at::Tensor s = smoothing_scales(a, w, options.alpha);
      const at::Tensor s_o = s.reshape({Hkv, 1, hd}).expand({Hkv, group, hd}).reshape({H * hd});
      if (config.fused_qkv)
        divide_rows(b.qkv, (H + Hkv) * hd, s);
      else
        divide_rows(b.v, 0, s);
      scale_columns(b.o, s_o);
      report["layers"].push_back(layer_entry(p + "attn.o", s, a));
    }
  }
  for (const auto& g : options.groups) {
    if (g == "down" && !config.gated_mlp())
      report["skipped"].push_back(
          {{"group", "down"}, {"reason", fmt::format("{} is not linear: no previous layer can take the scales", to_string(config.mlp))}});
    else
      report["groups"].push_back(g);
  }
  return report;
}

}  // namespace qeval
