// The hook through which a scheme quantises an attention layer's key/value cache (issue 62).
// model/ only calls it; quant/kv_cache.h implements it (quant/ depends on model/, not the other
// way). Block::attention hands it K (after any k-norm and rotary, as a cache stores it) and V
// of every position right before the attention kernel reads them, so every query, the one at
// the same position included, reads the quantised-dequantised values, as from a cache written
// and then read.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace qeval {

class KvCacheQuantizer {
 public:
  virtual ~KvCacheQuantizer() = default;
  // k, v: [B, Hkv, L, hd] of layer `layer`, replaced by their quantised-dequantised values
  // (same shape and dtype), per position and kv head along hd. Axis 2 is the window's position:
  // position 0 is the first of the window.
  virtual void apply(std::int64_t layer, at::Tensor& k, at::Tensor& v) const = 0;
};

}  // namespace qeval
