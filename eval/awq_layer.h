// AWQ's work on one layer (issue 77 item 3): what llm-compressor 0.14's AWQModifier does at the end
// of each layer of its sequential pipeline (on_sequential_epoch_end → _apply_smoothing), on the
// calibration stream that the earlier layers produce folded but in full precision (llm-compressor's
// propagating pass runs inside DisableQuantization; eval/weight_calibration_pass.h):
//
//   1. the layer as it was read runs on the stream, and the inputs of each mapping's first balance
//      linear are kept (llm-compressor's activation hook and its parent's cached arguments: for
//      q and gate that input is the normed hidden state the attention mixer or the MLP reads);
//   2. for each mapping in order (quant/calibration/awq_mappings.h): x_mean from those inputs; the
//      grid search (quant/calibration/awq_search.h) with the parent's forward run with the balance
//      weights replaced (the attention mixer and the MLP through Block::mixer_forward and
//      ffn_forward on the kept normed inputs, with the folds of the earlier mappings in place; o
//      and down as linears on their kept inputs); then the fold: the previous norm's gain (and
//      bias) or the previous linear's rows (and bias) ÷ s, the balance columns × s.
//
// A mapping none of whose linears the scheme quantises is skipped, as llm-compressor skips one
// with no targeted layer; so is v → o when the shapes differ (grouped-query attention).
// Runs on the CPU in float32; the caller quantises the folded weights and propagates the stream.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/block.h"
#include "model/forward_context.h"
#include "quant/schemes/spec.h"

namespace qeval {

struct AwqLayerResult {
  // Every tensor of the layer a fold changed, after all its folds, by named_tensors' name: norm
  // gains (and biases), the balance and previous linears' weights (and the previous ones' biases).
  std::map<std::string, at::Tensor> folded;
  // The record's account, one entry per mapping: {"name", "smooth", "balance", "parent",
  // "grid_index", "ratio", "duo", "loss", "initial_loss", "tokens"} or {"name", "smooth",
  // "balance", "skipped": why}.
  nlohmann::json mappings = nlohmann::json::array();
  std::map<std::string, std::string> balanced_by;  // linear → the mapping whose columns it balanced
};

// `stream`: the layer's inputs [B, L, D], one per batch, with each batch's context; `model` names
// the model in errors (a layout AWQ does not support here is refused).
AwqLayerResult awq_layer(const Block& full, const std::vector<at::Tensor>& stream,
                         const std::vector<ForwardContext>& contexts, const SchemeSpec& spec, const std::string& model);

}  // namespace qeval
