// Static activation scales (issue 61 item 4; quant/scheme.h "calibration"): how W8A8 is deployed.
// A scheme whose input activations are static takes, for each linear it quantises, one scale
// fixed before the evaluation from a **full-precision** pass (no scheme applied) over N
// calibration windows: windows of the evaluation data that the evaluation does not use, the
// first N of the stream in order (the rule --transform smooth uses, eval/model_transforms.h), so
// every shard and every resumed run calibrates on the same windows and gets the same scales.
//
// The statistic is over every element of the linear's input in those windows: max |x|, or the
// P-th percentile of |x| with linear interpolation (numpy's default: h = (n − 1) · P / 100,
// v[⌊h⌋] + (h − ⌊h⌋) · (v[⌊h⌋ + 1] − v[⌊h⌋]) over the sorted values). With keep_tokens
// {"first": k} the first k positions of every calibration window are left out, as they are left
// out of the quantiser in the evaluation. The maximum streams; a percentile holds one layer's
// inputs at a time (the pass is layer-major: every window passes layer l before layer l + 1
// starts, so a layer's values are final then).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "eval/model_transforms.h"
#include "loaders/checkpoints/model_reader.h"
#include "model/placement.h"
#include "quant/scheme.h"

namespace qeval {

class StaticScaleCalibrator {
 public:
  // `windows(n)`: the n calibration windows with their description (the evaluation's rule).
  StaticScaleCalibrator(ModelReader& full, std::function<CalibrationWindows(std::int64_t n)> windows,
                        Placement placement = {}, std::int64_t batch_size = 1);

  // Every linear's calibrated amax for this spec's calibration (windows, statistic, kept first
  // positions), measured once per distinct calibration and shared by the schemes that ask for it.
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

// The percentile rule above on values (reordered in place); P in (0, 100], values non-empty.
double percentile_linear(std::vector<float>& values, double percentile);

// The record's account of one scheme's static scales: the calibration's description with each
// selected linear's amax and the scale the scheme derives from it (quant/float_formats.h).
nlohmann::json static_scales_description(const SchemeSpec& spec, const std::vector<std::string>& linear_names);

}  // namespace qeval
