// GPTQ's and AWQ's calibration pass (issue 77): the sequential layer loop of llm-compressor 0.14's
// SequentialPipeline (and AutoGPTQ's), over N calibration windows that the evaluation does not use
// (the rule of static activation scales, eval/calibration_pass.h):
//
//   the windows' residual stream after the embedding; then for each layer l:
//     1. layer l as full precision has it runs on the stream, each selected linear's input summed
//        into its Hessian (quant/calibration/hessian.h), the output dropped;
//     2. each selected linear of layer l is solved (quant/calibration/gptq_solve.h);
//     (AWQ: 1-2 are eval/awq_layer.h: each mapping's scales searched and folded into the layer, then
//     the folded weights rounded to nearest, the folded norms kept in replaced_tensors;)
//     3. GPTQ: layer l as the scheme has it now (its linears quantised with those codes) runs on
//        the stream, which becomes layer l + 1's input. AWQ: layer l folded, in full precision,
//        does: llm-compressor 0.14's propagating pass runs inside DisableQuantization and its
//        QuantizationModifier only observes the weights (GPTQModifier writes its codes into the
//        weights, so GPTQ's stream is quantised); AutoAWQ takes a layer's outputs before scaling it.
//        tests/eval/awq_end_to_end_test.cpp shows llm-compressor's choices need this stream.
//
// So for GPTQ layer l is calibrated on the inputs that the scheme's own quantised layers before it
// produce, for AWQ on the folded full-precision model's, and the memory held is the windows' stream plus one layer's Hessians. Linears within a layer are
// calibrated together on its full-precision inputs (llm-compressor's default; AutoGPTQ's
// true_sequential re-runs the layer between its groups of linears). It runs on the CPU in float32.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "eval/model_transforms.h"
#include "loaders/checkpoints/model_reader.h"
#include "quant/calibration/gptq_weights.h"
#include "quant/schemes/spec.h"

namespace qeval {

class WeightCalibrator {
 public:
  // `windows(n)`: the n calibration windows with their description (the evaluation's rule).
  WeightCalibrator(ModelReader& full, std::function<CalibrationWindows(std::int64_t n)> windows,
                   std::int64_t batch_size = 1);

  // Every linear the spec selects in the blocks, solved as its weights' method says (GPTQ, AWQ), with
  // the record's account in `description`: {"method", "windows", "calibration", "window_hashes",
  // "tokens", "layers": [{"name", "loss", "dead_columns", "fell_back_to_rtn", "samples"}]}; AWQ's
  // layers are [{"name", "balanced_by"}] and it adds "mappings" (eval/awq_layer.h's account).
  // Made once per distinct weights spec and selection, shared by the schemes that ask for it.
  std::shared_ptr<const CalibratedWeights> weights_for(const SchemeSpec& spec);

  // AWQ: keep every folded linear weight in CalibratedWeights::replaced_tensors too, not only the
  // norms, biases and unquantised linears the scheme needs (tests: the folded model in full
  // precision; the memory of the model's linears again).
  bool keep_folded_linears = false;

 private:
  ModelReader& full_;
  std::function<CalibrationWindows(std::int64_t)> windows_;
  std::int64_t batch_size_;
  std::map<std::string, std::shared_ptr<const CalibratedWeights>> done_;
};

}  // namespace qeval
