// The calibration pass (issue 61 item 4): a full-precision evaluation (no scheme applied) over N
// calibration windows, with what quant/calibration/ collects riding on every linear's input. The
// windows are those of the evaluation data that the evaluation does not use, the first N of the
// stream in order (the rule --transform smooth uses, eval/model_transforms.h), so every shard and
// every resumed run calibrates on the same windows and gets the same scales. The pass is
// layer-major and holds one layer: a percentile's values are final once the next layer starts.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "eval/model_transforms.h"
#include "loaders/checkpoints/model_reader.h"
#include "model/placement.h"
#include "quant/schemes/spec.h"

namespace qeval {

class StaticScaleCalibrator {
 public:
  // `windows(n)`: the n calibration windows with their description (the evaluation's rule).
  StaticScaleCalibrator(ModelReader& full, std::function<CalibrationWindows(std::int64_t n)> windows,
                        Placement placement = {}, std::int64_t batch_size = 1);

  // Every linear's calibrated amax for this spec's calibration (windows, statistic, kept first
  // positions; quant/calibration/static_scales.h), measured once per distinct calibration and
  // shared by the schemes that ask for it.
  // description: {"windows", "statistic", "keep_first", "calibration" (which windows, the data's
  // path and hash), "window_hashes" (XXH3 of each window, hex), "layers": {name: amax}}.
  std::shared_ptr<const CalibratedScales> scales_for(const SchemeSpec& spec);

 private:
  ModelReader& full_;
  std::function<CalibrationWindows(std::int64_t)> windows_;
  Placement placement_;
  std::int64_t batch_size_;
  std::map<std::tuple<std::int64_t, double, std::int64_t>, std::shared_ptr<const CalibratedScales>> done_;
};

}  // namespace qeval
