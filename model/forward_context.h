// ForwardContext: what every layer of one forward pass shares, computed once per window length:
// one rotary table per RoPE base and one causal mask per attention window that some layer uses.
// The layer-major evaluator (eval/evaluator.h) builds one per batch and hands it to each layer of
// each scheme in turn, so a block's forward is the same call whatever order the plan visits it in.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace qeval {

struct ForwardContext {
  struct RopeTable {
    double theta = 0;
    at::Tensor cos, sin;  // [L, rotary_dims/2] rotary angles in the compute dtype
  };
  struct MaskTable {
    std::int64_t window = 0;  // 0: plain causal
    at::Tensor bias;          // [L, L]: 0 where query i sees key j, -inf elsewhere
  };
  std::int64_t length = 0;      // L
  std::vector<RopeTable> rope;  // rope positions only
  std::vector<MaskTable> masks;

  const RopeTable& rope_for(double theta) const;  // throws when no layer uses that base
  const at::Tensor& mask_for(std::int64_t window) const;
};

// The tables for windows of L tokens, in `like`'s dtype and on its device.
ForwardContext make_forward_context(const ModelConfig& config, std::int64_t L, const at::Tensor& like);

}  // namespace qeval
