#include "eval/calibration_pass.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "eval/evaluator.h"
#include "quant/calibration/static_scales.h"

namespace qeval {

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
  auto stat = std::make_shared<InputAbsStatistic>(c.percentile, keep_first);
  std::vector<EvalScheme> schemes(1);
  schemes[0].name = "full";
  schemes[0].wrap_block = [stat](const Block& block) { return with_input_statistic(block, stat); };
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

}  // namespace qeval
