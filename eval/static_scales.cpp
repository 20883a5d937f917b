#include "eval/static_scales.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "eval/evaluator.h"
#include "quant/float_formats.h"

namespace qeval {
namespace {

// The layer a canonical linear name belongs to ("layers.3.mlp.down" → 3); the head after all.
std::int64_t layer_of(const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return std::numeric_limits<std::int64_t>::max();
  return std::stoll(name.substr(7, name.find('.', 7) - 7));
}

// Reduces |x| of every linear's input (positions from `skip` on) to the calibration statistic.
class AbsStatistic {
 public:
  AbsStatistic(double percentile, std::int64_t skip) : percentile_(percentile), skip_(skip) {}

  void record(const std::string& name, const at::Tensor& x /*[B, L, in]*/) {
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

  // Every linear's statistic (all layers finished).
  std::map<std::string, double> finish() {
    finish_layers_before(std::numeric_limits<std::int64_t>::max());
    for (auto& [name, e] : entries_)
      if (!e.values.empty()) finish_entry(e);
    std::map<std::string, double> out;
    for (const auto& [name, e] : entries_)
      if (e.seen) out[name] = e.amax;
    return out;
  }

 private:
  struct Entry {
    bool seen = false;
    double amax = 0;
    std::vector<float> values;  // a percentile's |x| until its layer is done
  };
  void finish_entry(Entry& e) {
    e.amax = percentile_linear(e.values, percentile_);
    std::vector<float>().swap(e.values);
  }
  // Layer-major: once layer l records, every window has passed the layers before it.
  void finish_layers_before(std::int64_t layer) {
    for (auto& [name, e] : entries_)
      if (!e.values.empty() && layer_of(name) < layer) finish_entry(e);
  }

  double percentile_;
  std::int64_t skip_;
  std::map<std::string, Entry> entries_;
};

class StatisticLinear final : public LinearDecorator {
 public:
  StatisticLinear(std::shared_ptr<const Linear> inner, std::shared_ptr<AbsStatistic> stat, std::string name)
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
  std::shared_ptr<AbsStatistic> stat_;
  std::string name_;
};


}  // namespace

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

StaticScaleCalibrator::StaticScaleCalibrator(ModelReader& full, std::function<CalibrationWindows(std::int64_t)> windows,
                                             Placement placement, std::int64_t batch_size)
    : full_(full), windows_(std::move(windows)), placement_(placement), batch_size_(std::max<std::int64_t>(batch_size, 1)) {}

std::shared_ptr<const CalibratedScales> StaticScaleCalibrator::scales_for(const SchemeSpec& spec) {
  QEVAL_CHECK(spec.needs_calibration(), "StaticScaleCalibrator: scheme {} has no static input scale", spec.name);
  const ActivationCalibration& c = *spec.input_activations.calibration;
  const std::int64_t keep_first = spec.keep_tokens.rule == KeepRule::first ? spec.keep_tokens.count : 0;
  const auto key = std::make_tuple(c.windows, c.percentile, keep_first);
  if (auto found = done_.find(key); found != done_.end()) return found->second;

  CalibrationWindows calib = windows_(c.windows);
  auto stat = std::make_shared<AbsStatistic>(c.percentile, keep_first);
  std::vector<EvalScheme> schemes(1);
  schemes[0].name = "full";
  schemes[0].wrap_block = [stat](const Block& block) {
    Block out = block;
    for (const auto& named : block.linears())
      out.replace_linear(named.name, std::make_shared<StatisticLinear>(named.linear, stat, named.name));
    return out;
  };
  schemes[0].on_head_input = [stat](const at::Tensor& x) { stat->record("lm_head", x); };
  auto source = calibration_window_source(calib.windows);
  EvalOptions options;
  options.progress = false;
  options.batch_size = batch_size_;
  options.placement = placement_;
  // One chunk of every calibration window, read layer by layer and dropped: the pass is
  // layer-major (a percentile's values are final once the next layer starts) and holds one layer.
  options.plan.name = "streamed";
  options.plan.keep_full_blocks = false;
  options.plan.keep_scheme_blocks = false;
  options.plan.chunk_windows = static_cast<std::int64_t>(calib.windows.size());
  evaluate(full_, schemes, *source, options);

  auto scales = std::make_shared<CalibratedScales>();
  scales->amax = stat->finish();
  nlohmann::json hashes = nlohmann::json::array();
  for (const Window& w : calib.windows) hashes.push_back(fmt::format("{:016x}", window_hash(w)));
  nlohmann::json layers = nlohmann::json::object();
  for (const auto& [name, amax] : scales->amax) layers[name] = amax;
  scales->description = {{"windows", c.windows},
                         {"statistic", c.statistic_name()},
                         {"keep_first", keep_first},
                         {"device", placement_.device.str()},
                         {"calibration", calib.description},
                         {"window_hashes", hashes},
                         {"amax", layers}};
  done_[key] = scales;
  return scales;
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
