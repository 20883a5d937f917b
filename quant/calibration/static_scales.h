// Static activation scales (issue 61 item 4; quant/schemes/spec.h "calibration"): how W8A8 is
// deployed. A scheme whose input activations are static takes, for each linear it quantises, one
// scale fixed before the evaluation from a **full-precision** pass (no scheme applied) over N
// calibration windows. This file holds what the pass collects and what the record says of it; the
// pass itself (which windows, the layer-major plan that runs them) is eval/calibration_pass.h.
//
// The statistic is over every element of the linear's input in those windows: max |x|, or the
// P-th percentile of |x| with linear interpolation (numpy's default: h = (n − 1) · P / 100,
// v[⌊h⌋] + (h − ⌊h⌋) · (v[⌊h⌋ + 1] − v[⌊h⌋]) over the sorted values). With keep_tokens
// {"first": k} the first k positions of every calibration window are left out, as they are left
// out of the quantiser in the evaluation. The maximum streams; a percentile holds one layer's
// inputs at a time (the pass is layer-major: every window passes layer l before layer l + 1
// starts, so a layer's values are final then).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/block.h"
#include "quant/schemes/spec.h"

namespace qeval {

// Reduces |x| of every linear's input (positions from `skip` on) to the calibration statistic
// (percentile 100: the maximum).
class InputAbsStatistic {
 public:
  InputAbsStatistic(double percentile, std::int64_t skip) : percentile_(percentile), skip_(skip) {}

  // x: the input [B, L, in] of the linear called `name` (canonical; "lm_head" for the head).
  void record(const std::string& name, const at::Tensor& x);
  // Every linear's statistic, by name (all layers finished).
  std::map<std::string, double> finish();

 private:
  struct Entry {
    bool seen = false;
    double amax = 0;
    std::vector<float> values;  // a percentile's |x| until its layer is done
  };
  void finish_entry(Entry& e);
  // Layer-major: once layer l records, every window has passed the layers before it.
  void finish_layers_before(std::int64_t layer);

  double percentile_;
  std::int64_t skip_;
  std::map<std::string, Entry> entries_;
};

// `block` with every linear's input handed to `stat` before the linear runs (outputs unchanged).
Block with_input_statistic(const Block& block, const std::shared_ptr<InputAbsStatistic>& stat);

// The percentile rule above on values (reordered in place); P in (0, 100], values non-empty.
double percentile_linear(std::vector<float>& values, double percentile);

// The record's account of one scheme's static scales: the calibration's description with each
// selected linear's amax and the scale the scheme derives from it (quant/float_quantize.h).
nlohmann::json static_scales_description(const SchemeSpec& spec, const std::vector<std::string>& linear_names);

}  // namespace qeval
