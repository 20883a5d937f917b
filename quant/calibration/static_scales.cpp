#include "quant/calibration/static_scales.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "quant/float_quantize.h"

namespace qeval {
namespace {

// The layer a canonical linear name belongs to ("layers.3.mlp.down" → 3); the head after all.
std::int64_t layer_of(const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return std::numeric_limits<std::int64_t>::max();
  return std::stoll(name.substr(7, name.find('.', 7) - 7));
}

class StatisticLinear final : public LinearDecorator {
 public:
  StatisticLinear(std::shared_ptr<const Linear> inner, std::shared_ptr<InputAbsStatistic> stat, std::string name)
      : LinearDecorator(std::move(inner)), stat_(std::move(stat)), name_(std::move(name)) {}
  at::Tensor forward(const at::Tensor& x) const override {
    stat_->record(name_, x);
    return inner_->forward(x);
  }

 protected:
  std::shared_ptr<const Linear> with_inner(std::shared_ptr<const Linear> inner) const override {
    return std::make_shared<StatisticLinear>(std::move(inner), stat_, name_);
  }

 private:
  std::shared_ptr<InputAbsStatistic> stat_;
  std::string name_;
};

}  // namespace

void InputAbsStatistic::record(const std::string& name, const at::Tensor& x /*[B, L, in]*/) {
  const std::int64_t L = x.size(1);
  if (x.size(0) == 0 || L <= skip_) return;
  const at::Tensor rest = x.detach().narrow(1, skip_, L - skip_).abs();
  Entry& e = entries_[name];
  e.seen = true;
  if (percentile_ == 100) {
    e.amax = std::max(e.amax, rest.max().item<double>());  // max |x| is exact in any dtype
    return;
  }
  finish_layers_before(layer_of(name));
  const at::Tensor values = rest.to(at::kFloat).cpu().contiguous().reshape({-1});
  const float* p = values.data_ptr<float>();
  e.values.insert(e.values.end(), p, p + values.numel());
}

std::map<std::string, double> InputAbsStatistic::finish() {
  finish_layers_before(std::numeric_limits<std::int64_t>::max());
  for (auto& [name, e] : entries_)
    if (!e.values.empty()) finish_entry(e);
  std::map<std::string, double> out;
  for (const auto& [name, e] : entries_)
    if (e.seen) out[name] = e.amax;
  return out;
}

void InputAbsStatistic::finish_entry(Entry& e) {
  e.amax = percentile_linear(e.values, percentile_);
  std::vector<float>().swap(e.values);
}

void InputAbsStatistic::finish_layers_before(std::int64_t layer) {
  for (auto& [name, e] : entries_)
    if (!e.values.empty() && layer_of(name) < layer) finish_entry(e);
}

Block with_input_statistic(const Block& block, const std::shared_ptr<InputAbsStatistic>& stat) {
  Block out = block;
  for (const auto& named : block.linears())
    out.replace_linear(named.name, std::make_shared<StatisticLinear>(named.linear, stat, named.name));
  return out;
}

double percentile_linear(std::vector<float>& v, double percentile) {
  QEVAL_CHECK(!v.empty() && percentile > 0 && percentile <= 100, "percentile_linear: {} values, P = {}", v.size(),
              percentile);
  const double h = static_cast<double>(v.size() - 1) * percentile / 100.0;
  const std::size_t lo = static_cast<std::size_t>(std::floor(h));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
  const double below = v[lo];
  if (lo + 1 >= v.size() || h == static_cast<double>(lo)) return below;
  const double above = *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end());
  return below + (h - static_cast<double>(lo)) * (above - below);
}

nlohmann::json static_scales_description(const SchemeSpec& spec, const std::vector<std::string>& linear_names) {
  QEVAL_CHECK(spec.calibrated, "scheme {}: static scales not calibrated", spec.name);
  nlohmann::json d = spec.calibrated->description;
  d.erase("amax");
  nlohmann::json layers = nlohmann::json::array();
  for (const std::string& name : linear_names) {
    if (!spec.selects(name)) continue;
    const auto it = spec.calibrated->amax.find(name);
    QEVAL_CHECK(it != spec.calibrated->amax.end(), "scheme {}: no calibrated input for linear {}", spec.name, name);
    layers.push_back({{"name", name}, {"amax", it->second},
                      {"scale", static_activation_scale(spec.input_activations, it->second)}});
  }
  d["layers"] = layers;
  return d;
}

}  // namespace qeval
