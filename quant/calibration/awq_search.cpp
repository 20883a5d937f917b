// AWQ's scale search and fold (awq_search.h). Each step follows the reference's tensor operations in
// the same dtypes and order (llm-compressor promotes float32 statistics to float64 through w_mean),
// so that losses and scales agree to float32 rounding and codes to the bit.
#include "quant/calibration/awq_search.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"

namespace qeval {

std::string to_string(AwqDuoScaling v) {
  switch (v) {
    case AwqDuoScaling::off: return "off";
    case AwqDuoScaling::on: return "on";
    case AwqDuoScaling::both: return "both";
  }
  return "?";
}

std::string to_string(AwqReference v) { return v == AwqReference::llm_compressor ? "llm-compressor" : "autoawq"; }

namespace {

// "[a, b]" (a dtype-free shape for errors), or "undefined".
std::string shape_of(const at::Tensor& t) {
  return t.defined() ? fmt::format("[{}]", fmt::join(t.sizes(), ", ")) : std::string("undefined");
}

void check_options(const AwqOptions& o, std::int64_t K, const std::string& name) {
  QEVAL_CHECK(o.bits >= 2 && o.bits <= 8, "AWQ {}: bits must be 2 … 8, found {}", name, o.bits);
  QEVAL_CHECK(o.group_size >= 0, "AWQ {}: group_size must be 0 (per channel) or positive, found {}", name,
              o.group_size);
  // llm-compressor's range always holds 0, so a short last group is the same as one padded with
  // zeros (qeval's rule for any width; compressed-tensors refuses a width above g that g does not
  // divide); AutoAWQ's range is the group's own min and max, which padding would change.
  QEVAL_CHECK(o.group_size == 0 || K % o.group_size == 0 || o.reference == AwqReference::llm_compressor,
              "AWQ {}: input width {} is not a multiple of group_size {} (AutoAWQ's quantiser needs whole groups)",
              name, K, o.group_size);
  const int least = o.reference == AwqReference::llm_compressor && o.duo_scaling != AwqDuoScaling::off ? 3 : 2;
  QEVAL_CHECK(o.n_grid >= least, "AWQ {}: n_grid must be at least {} with duo_scaling {}, found {}", name, least,
              to_string(o.duo_scaling), o.n_grid);
  QEVAL_CHECK(o.reference == AwqReference::llm_compressor || o.duo_scaling != AwqDuoScaling::both,
              "AWQ {}: duo_scaling both is llm-compressor's; AutoAWQ has on or off", name);
}

// The balance weights' common input width, checking they are 2-D floating tensors of one dtype.
std::int64_t check_balance(const std::vector<at::Tensor>& ws, const std::string& name) {
  QEVAL_CHECK(!ws.empty(), "AWQ {}: expected at least one balance weight, found none", name);
  const std::int64_t K = ws[0].dim() == 2 ? ws[0].size(1) : -1;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const at::Tensor& w = ws[i];
    QEVAL_CHECK(w.defined() && w.dim() == 2 && w.size(1) == K && w.size(0) > 0,
                "AWQ {}: balance weight {} must be [N, {}], found {}", name, i, K,
                shape_of(w));
    QEVAL_CHECK(w.scalar_type() == ws[0].scalar_type() && at::isFloatingType(w.scalar_type()),
                "AWQ {}: balance weight {} must be floating and of weight 0's dtype {}, found {}", name, i,
                c10::toString(ws[0].scalar_type()), c10::toString(w.scalar_type()));
  }
  return K;
}

}  // namespace

AwqActivationMean::AwqActivationMean(std::int64_t channels) : sum_(at::zeros({channels}, at::kFloat)) {
  QEVAL_CHECK(channels > 0, "AWQ activation mean: channels must be positive, found {}", channels);
}

void AwqActivationMean::add(const at::Tensor& x) {
  QEVAL_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == sum_.size(0),
              "AWQ activation mean: expected inputs [..., {}], found {}", sum_.size(0),
              shape_of(x));
  // llm-compressor: args[0].abs() in the inputs' dtype, flatten(0, -2), .float().sum(0).
  const at::Tensor flat = x.abs().reshape({-1, x.size(-1)});
  sum_ += flat.to(at::kFloat).sum(0);
  tokens_ += flat.size(0);
}

at::Tensor AwqActivationMean::mean() const {
  QEVAL_CHECK(tokens_ > 0, "AWQ activation mean: no calibration token was added");
  return sum_ / at::scalar_tensor(tokens_, at::kLong);
}

at::Tensor awq_weight_mean(const std::vector<at::Tensor>& balance_weights, const AwqOptions& o) {
  const std::int64_t K = check_balance(balance_weights, "weight mean");
  check_options(o, K, "weight mean");
  const std::int64_t chunk = o.group_size > 0 ? o.group_size : K;
  const std::int64_t padded = (K + chunk - 1) / chunk * chunk;  // a short last group padded with zeros
  if (o.reference == AwqReference::autoawq) {
    at::Tensor w = at::cat(balance_weights, 0);
    at::Tensor g = w.reshape({-1, chunk}).abs();
    g = g / (g.amax(1, /*keepdim=*/true) + 1e-6);
    return g.reshape(w.sizes()).mean(0);
  }
  at::Tensor total;  // float64, llm-compressor's get_high_precision()
  std::int64_t rows = 0;
  for (const at::Tensor& w : balance_weights) {
    const at::Tensor wp = padded == K ? w : at::constant_pad_nd(w, {0, padded - K});
    at::Tensor g = wp.reshape({-1, chunk}).abs();
    g.div_(g.amax(1, /*keepdim=*/true) + 1e-6);
    const at::Tensor s = g.reshape(wp.sizes()).narrow(1, 0, K).sum(0, /*keepdim=*/false, at::kDouble);
    total = total.defined() ? total + s : s;
    rows += w.size(0);
  }
  return total / static_cast<double>(rows);
}

std::vector<AwqGridPoint> awq_grid(const AwqOptions& o) {
  check_options(o, o.group_size > 0 ? o.group_size : 1, "grid");
  std::vector<AwqGridPoint> grid;
  const int n = o.n_grid;
  if (o.reference == AwqReference::autoawq) {
    for (int i = 0; i < n; ++i) grid.push_back({static_cast<double>(i) / n, o.duo_scaling == AwqDuoScaling::on, 0});
    return grid;
  }
  switch (o.duo_scaling) {
    case AwqDuoScaling::off:
      for (int i = 0; i < n; ++i) grid.push_back({static_cast<double>(i) / (n - 1), false, 0});
      break;
    case AwqDuoScaling::on:  // identity scaling first, so that it is always a candidate
      grid.push_back({0.0, false, 0});
      for (int i = 0; i < n - 1; ++i) grid.push_back({static_cast<double>(i) / (n - 2), true, 0});
      break;
    case AwqDuoScaling::both: {
      const int half = n / 2;
      QEVAL_CHECK(half >= 2, "AWQ grid: duo_scaling both needs n_grid >= 4, found {}", n);
      for (int i = 0; i < half; ++i)
        for (bool duo : {false, true}) grid.push_back({static_cast<double>(i) / (half - 1), duo, 0});
      break;
    }
  }
  return grid;
}

at::Tensor awq_scales_at(const at::Tensor& x_mean, const at::Tensor& w_mean, double ratio, bool duo) {
  at::Tensor s;
  if (duo) {
    QEVAL_CHECK(w_mean.defined() && w_mean.sizes() == x_mean.sizes(), "AWQ scales: w_mean must be {}, found {}",
                shape_of(x_mean), shape_of(w_mean));
    s = (x_mean.pow(ratio) / (w_mean.pow(1 - ratio) + 1e-4)).clamp_min(1e-4);
  } else {
    s = x_mean.pow(ratio).clamp_min(1e-4).view({-1});
  }
  s = s / (s.max() * s.min()).sqrt();
  s.masked_fill_(at::isinf(s), 1);
  s.masked_fill_(at::isnan(s), 1);
  return s;
}

AwqQuantized awq_quantize(const at::Tensor& weight, const AwqOptions& o, const std::string& name) {
  QEVAL_CHECK(weight.defined() && weight.dim() == 2 && (weight.scalar_type() == at::kFloat ||
                                                        weight.scalar_type() == at::kDouble),
              "AWQ quantise {}: expected a 2-D float32 or float64 weight, found {}", name,
              weight.defined() ? fmt::format("{} {}", shape_of(weight), c10::toString(weight.scalar_type()))
                               : std::string("undefined"));
  const std::int64_t N = weight.size(0), K = weight.size(1);
  check_options(o, K, "quantise " + name);
  const std::int64_t gs = o.group_size > 0 ? o.group_size : K, G = (K + gs - 1) / gs;
  // A short last group (llm-compressor's rule only, check_options): padded with zeros, which its
  // range [min(min w, 0), max(max w, 0)] already holds.
  const at::Tensor w = (G * gs == K ? weight : at::constant_pad_nd(weight, {0, G * gs - K})).reshape({N, G, gs});
  const double offset = static_cast<double>(std::int64_t{1} << (o.bits - 1));  // 2^(b−1)
  const double qmax_u = 2 * offset - 1;                                       // 2^b − 1
  at::Tensor scales, zeros, q;  // zeros and q unsigned (signed + offset)
  if (o.reference == AwqReference::llm_compressor) {
    const double qmin = -offset, qmax = offset - 1;
    const at::Tensor lo = at::minimum(w.amin(-1), at::zeros({}, w.options()));
    const at::Tensor hi = at::maximum(w.amax(-1), at::zeros({}, w.options()));
    at::Tensor z;
    if (o.symmetric) {
      scales = at::maximum(lo.abs(), hi.abs()) / (qmax_u / 2);
      z = at::zeros_like(scales);
    } else {
      scales = (hi - lo) / qmax_u;
      z = (qmin - lo / scales).clamp(qmin, qmax);
      z = at::where(at::isnan(z), at::zeros_like(z), z).round();  // an all-zero group: 0 / 0, which int8 holds as 0
    }
    const double eps = weight.scalar_type() == at::kFloat ? std::numeric_limits<float>::epsilon()
                                                          : std::numeric_limits<double>::epsilon();
    scales = at::where(scales == 0, at::full({}, eps, scales.options()), scales);
    at::Tensor v = w / scales.unsqueeze(-1);
    if (!o.symmetric) v = v + z.unsqueeze(-1);
    q = v.clamp(qmin, qmax).round();
    zeros = z + offset;
    q = q + offset;
  } else if (o.symmetric) {
    scales = w.abs().amax(-1).clamp_min(1e-5) / (offset - 1);
    q = (w / scales.unsqueeze(-1)).round().clamp(-offset, offset - 1) + offset;
    zeros = at::full_like(scales, offset);
  } else {
    const at::Tensor lo = w.amin(-1), hi = w.amax(-1);
    scales = (hi - lo).clamp_min(1e-5) / qmax_u;
    zeros = (-(lo / scales).round()).clamp(0, qmax_u);
    q = ((w / scales.unsqueeze(-1)).round() + zeros.unsqueeze(-1)).clamp(0, qmax_u);
  }
  AwqQuantized r;
  r.dequantized = ((q - zeros.unsqueeze(-1)) * scales.unsqueeze(-1)).reshape({N, G * gs}).narrow(1, 0, K).contiguous();
  r.codes = q.reshape({N, G * gs}).narrow(1, 0, K).to(at::kByte).contiguous();
  r.scales = scales;
  r.zeros = zeros;
  return r;
}

double awq_output_loss(const std::vector<at::Tensor>& fp, const std::vector<at::Tensor>& qo, AwqReference reference) {
  QEVAL_CHECK(fp.size() == qo.size() && !fp.empty(), "AWQ loss: expected as many quantised outputs as "
              "full-precision ones (at least one), found {} and {}", qo.size(), fp.size());
  std::int64_t count = 0;
  if (reference == AwqReference::autoawq) {
    double loss = 0;
    for (std::size_t b = 0; b < fp.size(); ++b) {
      loss += (fp[b] - qo[b]).to(at::kFloat).pow(2).sum().item<double>();
      count += fp[b].numel();
    }
    return loss / static_cast<double>(count);
  }
  at::Tensor loss = at::zeros({}, at::kFloat);
  for (std::size_t b = 0; b < fp.size(); ++b) {
    QEVAL_CHECK(fp[b].sizes() == qo[b].sizes(), "AWQ loss: batch {}: the quantised output is {}, the full-precision "
                "one {}", b, shape_of(qo[b]), shape_of(fp[b]));
    loss += at::mse_loss(fp[b], qo[b], at::Reduction::Sum);
    count += fp[b].numel();
  }
  return (loss / at::scalar_tensor(count, at::kLong)).item<double>();
}

AwqSearchResult awq_search_scales(const AwqMappingInputs& in, const AwqParentForward& parent_forward,
                                  const AwqOptions& o) {
  const std::string& name = in.name;
  const std::int64_t K = check_balance(in.balance_weights, name);
  check_options(o, K, name);
  QEVAL_CHECK(in.x_mean.defined() && in.x_mean.dim() == 1 && in.x_mean.size(0) == K,
              "AWQ {}: x_mean must be [{}], found {}", name, K,
              shape_of(in.x_mean));
  QEVAL_CHECK(static_cast<bool>(parent_forward), "AWQ {}: no parent forward given", name);

  const std::vector<at::Tensor> fp = parent_forward(in.balance_weights);
  QEVAL_CHECK(!fp.empty(), "AWQ {}: the parent's forward returned no batch", name);
  AwqSearchResult r;
  r.grid = awq_grid(o);
  const bool any_duo = std::any_of(r.grid.begin(), r.grid.end(), [](const AwqGridPoint& p) { return p.duo; });
  if (any_duo) r.w_mean = awq_weight_mean(in.balance_weights, o);

  double best = std::numeric_limits<double>::infinity();
  bool found = false;
  std::vector<at::Tensor> quantised(in.balance_weights.size());
  for (std::size_t g = 0; g < r.grid.size(); ++g) {
    AwqGridPoint& p = r.grid[g];
    const at::Tensor s = awq_scales_at(in.x_mean, r.w_mean, p.ratio, p.duo);
    const at::Tensor sv = s.view({1, -1});
    for (std::size_t i = 0; i < in.balance_weights.size(); ++i) {
      const at::Tensor& w = in.balance_weights[i];
      const at::Tensor scaled = (w * sv).to(w.scalar_type());  // llm-compressor: weight.copy_(W * s)
      quantised[i] = (awq_quantize(scaled, o, name).dequantized / sv).to(w.scalar_type());
    }
    const std::vector<at::Tensor> out = parent_forward(quantised);
    QEVAL_CHECK(out.size() == fp.size(), "AWQ {}: the parent's forward returned {} batches, then {}", name, fp.size(),
                out.size());
    for (std::size_t b = 0; b < out.size(); ++b)
      QEVAL_CHECK(out[b].sizes() == fp[b].sizes(), "AWQ {}: batch {}'s output was {}, then {}", name, b,
                  shape_of(fp[b]), shape_of(out[b]));
    p.loss = awq_output_loss(fp, out, o.reference);
    if (g == 0) r.initial_loss = p.loss;
    if (p.loss < best) {  // strictly: the first of equal losses wins, a NaN never does
      best = p.loss;
      r.best_index = g;
      r.scales = s.clone();
      found = true;
    }
  }
  QEVAL_CHECK(found, "AWQ {}: no grid point gave a finite loss (the parent's output has NaN or inf)", name);
  r.best_loss = best;
  return r;
}

AwqSearchResult awq_search_scales_linear(const AwqMappingInputs& in, const std::vector<at::Tensor>& batches,
                                         const AwqOptions& o) {
  QEVAL_CHECK(!batches.empty(), "AWQ {}: expected at least one calibration batch, found none", in.name);
  const std::int64_t K = check_balance(in.balance_weights, in.name);
  for (std::size_t b = 0; b < batches.size(); ++b)
    QEVAL_CHECK(batches[b].defined() && batches[b].dim() >= 1 && batches[b].size(-1) == K,
                "AWQ {}: batch {} must be [..., {}], found {}", in.name, b, K,
                shape_of(batches[b]));
  const AwqParentForward forward = [&batches](const std::vector<at::Tensor>& ws) {
    std::vector<at::Tensor> out;
    out.reserve(batches.size());
    for (const at::Tensor& x : batches) {
      std::vector<at::Tensor> parts;
      parts.reserve(ws.size());
      for (const at::Tensor& w : ws) parts.push_back(at::linear(x, w));
      out.push_back(parts.size() == 1 ? parts[0] : at::cat(parts, -1));
    }
    return out;
  };
  return awq_search_scales(in, forward, o);
}

void awq_fold_scales(const at::Tensor& scales, const at::Tensor& previous_weight, const at::Tensor& previous_bias,
                     const std::vector<at::Tensor>& balance_weights, const std::string& name) {
  QEVAL_CHECK(scales.defined() && scales.dim() == 1, "AWQ fold {}: scales must be 1-D, found {}", name,
              shape_of(scales));
  const std::int64_t K = scales.size(0);
  QEVAL_CHECK(previous_weight.defined() && previous_weight.dim() >= 1 && previous_weight.size(0) >= K &&
                  (previous_weight.dim() > 1 || previous_weight.size(0) == K),
              "AWQ fold {}: the previous op's weight must be [{}] (a norm) or [M >= {}, ...] (a linear), found {}",
              name, K, K, shape_of(previous_weight));
  QEVAL_CHECK(!previous_bias.defined() || (previous_bias.dim() == 1 && previous_bias.size(0) == previous_weight.size(0)),
              "AWQ fold {}: the previous op's bias must be [{}], found {}", name, previous_weight.size(0),
              shape_of(previous_bias));
  for (std::size_t i = 0; i < balance_weights.size(); ++i)
    QEVAL_CHECK(balance_weights[i].defined() && balance_weights[i].dim() == 2 && balance_weights[i].size(1) == K,
                "AWQ fold {}: balance weight {} must be [N, {}], found {}", name, i, K,
                shape_of(balance_weights[i]));

  // The balance layers see x / s: their columns take × s (llm-compressor: orig * scales.view(1, -1)).
  for (const at::Tensor& w : balance_weights) w.copy_(w * scales.view({1, -1}));
  const std::int64_t M = previous_weight.size(0);
  if (previous_weight.dim() == 1) {
    previous_weight.div_(scales);
  } else {  // a linear's last K output rows (llm-compressor: weight[-K:].div_(scales.view(-1, 1)))
    std::vector<std::int64_t> shape(static_cast<std::size_t>(previous_weight.dim()), 1);
    shape[0] = K;
    previous_weight.narrow(0, M - K, K).div_(scales.view(shape));
  }
  if (previous_bias.defined()) previous_bias.narrow(0, M - K, K).div_(scales);
}

bool awq_clip_skips(const std::string& linear_name) {
  for (const char* part : {"q_", "k_", "query", "key", "Wqkv"})
    if (linear_name.find(part) != std::string::npos) return true;
  return false;
}

at::Tensor awq_search_clip(const at::Tensor& weight, const at::Tensor& inputs, const AwqOptions& o,
                           const AwqClipOptions& clip, const std::string& name) {
  QEVAL_CHECK(weight.defined() && weight.dim() == 2 && at::isFloatingType(weight.scalar_type()),
              "AWQ clip {}: expected a 2-D floating weight, found {}", name, shape_of(weight));
  const std::int64_t N = weight.size(0), K = weight.size(1);
  check_options(o, K, "clip " + name);
  QEVAL_CHECK(o.group_size == 0 || K % o.group_size == 0,
              "AWQ clip {}: input width {} is not a multiple of group_size {}", name, K, o.group_size);
  QEVAL_CHECK(inputs.defined() && inputs.dim() >= 1 && inputs.size(-1) == K,
              "AWQ clip {}: inputs must be [..., {}], found {}", name, K, shape_of(inputs));
  QEVAL_CHECK(clip.n_grid > 0 && clip.max_shrink > 0 && clip.max_shrink <= 1 && clip.n_sample_token > 0 &&
                  clip.row_batch > 0,
              "AWQ clip {}: n_grid, max_shrink (0, 1], n_sample_token and row_batch must be positive, found {}, {}, "
              "{}, {}", name, clip.n_grid, clip.max_shrink, clip.n_sample_token, clip.row_batch);
  const std::int64_t gs = o.group_size > 0 ? o.group_size : K, G = K / gs;
  at::Tensor x = inputs.reshape({-1, K});
  const std::int64_t step = std::max<std::int64_t>(1, x.size(0) / clip.n_sample_token);
  x = x.reshape({1, x.size(0), G, gs}).slice(1, 0, x.size(0), step);  // [1, n, G, gs]
  const int shrinks = static_cast<int>(clip.max_shrink * clip.n_grid);
  std::vector<at::Tensor> best_all;
  for (std::int64_t r0 = 0; r0 < N; r0 += clip.row_batch) {
    const std::int64_t rows = std::min(clip.row_batch, N - r0);
    const at::Tensor w = weight.narrow(0, r0, rows).reshape({rows, 1, G, gs});
    const at::Tensor org_max = w.abs().amax(-1, /*keepdim=*/true);  // [rows, 1, G, 1]
    at::Tensor best = org_max.clone();
    at::Tensor min_err = at::ones_like(org_max) * 1e9;
    const at::Tensor org_out = (x * w).sum(-1);  // [rows, n, G]
    for (int i = 0; i < shrinks; ++i) {
      const at::Tensor max_val = org_max * (1 - static_cast<double>(i) / clip.n_grid);
      const at::Tensor cur = at::clamp(w, -max_val, max_val);
      const at::Tensor q = awq_quantize(cur.reshape({rows, K}), o, name).dequantized.reshape(w.sizes());
      const at::Tensor err = ((x * q).sum(-1) - org_out).pow(2).mean(1).view(min_err.sizes());
      const at::Tensor better = err < min_err;
      min_err = at::where(better, err, min_err);
      best = at::where(better, max_val, best);
    }
    best_all.push_back(best.reshape({rows, G}));
  }
  return at::cat(best_all, 0);
}

void awq_apply_clip(const at::Tensor& weight, const at::Tensor& max_val, const std::string& name) {
  QEVAL_CHECK(weight.defined() && weight.dim() == 2 && max_val.defined() && max_val.dim() == 2 &&
                  max_val.size(0) == weight.size(0) && max_val.size(1) > 0 && weight.size(1) % max_val.size(1) == 0,
              "AWQ clip {}: thresholds must be [N, G] with G dividing K for weight [N, K], found {} for {}", name,
              shape_of(max_val), shape_of(weight));
  const at::Tensor m = max_val.unsqueeze(-1);
  const at::Tensor w = weight.reshape({weight.size(0), max_val.size(1), -1});
  weight.copy_(at::clamp(w, -m, m).reshape(weight.sizes()));
}

}  // namespace qeval
