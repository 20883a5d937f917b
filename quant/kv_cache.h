// Quantised key/value caches (issue 62; definitions in docs/kv-cache.md, the scheme key in
// quant/schemes/spec.h): the model/kv_cache_hook.h hook implemented for each element format.
//
// A row is one position of one kv head: head_dim values of K (after k-norm and rotary) or of V.
// Each row is quantised and dequantised on its own (float32 throughout):
//   int8      s = amax / 127 (1 where amax = 0), q = clamp(round_half_even(x / s), ±127), x̂ = q·s
//             (an IEEE division, as quant/quantize.h's int8_absmax)
//   fp8-e4m3  s = amax / 448 (1 where amax = 0), x̂ = round_to_element(x / s)·s: clamp to ±448,
//             nearest with ties to even (quant/formats/minifloat.h's element_round_trip)
//   q8_0      llama.cpp's quantize_row_q8_0 then dequantize_row_q8_0 over blocks of 32
//   q4_0      llama.cpp's quantize_row_q4_0 then dequantize_row_q4_0 (quant/formats/ggml/quants.h): the
//             codes come from the float32 d through 1/d, dequantisation uses fp16(d)
//   int4      qeval's 4-bit zero-point (quant/quantize.h) per group of `group_size` along the row,
//             the last group shorter (one group when head_dim ≤ group_size)
// Positions 0..keep_first−1 of each window (axis 2) are copied unchanged. With rotation hadamard a
// row is rotated, quantised and rotated back: x̂ = H · Q(H · x) (quant/schemes/spec.h).
//
// The quantiser also accumulates, per layer and window, Σ‖x − x̂‖² and Σ‖x‖² over K and V rows,
// apart for position 0 and for the others, in float64: on the float32 CPU placement summed in row
// order (so the same windows give the same numbers whatever the thread count), elsewhere by ATen's
// sums on the device. error_report() reduces them in window order into relative Frobenius errors
// pooled over heads and windows, so the same windows give the same report bit for bit whichever
// batches, chunks, shards or resumed processes they ran in (the sums travel in run states and shard
// records: records/run_state.h).
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/kv_cache_hook.h"
#include "quant/kv_cache_tensor.h"  // kKvGgmlBlock
#include "quant/schemes/spec.h"

namespace qeval {


// y[0..n) = x[0..n) quantised and dequantised as one row under spec's format (y may be x).
void kv_round_trip_row(const KvCacheSpec& spec, const float* x, float* y, std::int64_t n);

// x [..., hd] float32 CPU → every row round-tripped (keep_first ignored): the tests' entry point.
// With spec.rotation hadamard, rows are rotated as K's (is_key) or V's are.
at::Tensor kv_round_trip_rows(const at::Tensor& x, const KvCacheSpec& spec, bool is_key = true);

// x ← H_b · x on each block of b consecutive values (n a multiple of b, b a power of two): the
// orthonormal Walsh-Hadamard matrix in Sylvester's order (H[i][j] = (−1)^popcount(i & j) / √b,
// ggml_gen_hadamard's), by the fast transform. H is symmetric and H · H = I.
void hadamard_blocks(float* x, std::int64_t n, std::int64_t b);

// Throws when the spec cannot run on this model: a model without attention layers (naming the
// model), or q8_0 / q4_0 on a head_dim that is not a multiple of 32 (naming the first attention
// layer and the head_dim). `scheme` and `model` name them in the message.
void check_kv_cache_fits(const KvCacheSpec& spec, const ModelConfig& config, const std::string& model,
                         const std::string& scheme);

// A quantised cache's error sums by layer and window (each window's K and V rows summed in row order).
struct KvErrorSums {
  struct Window {
    double err[4] = {0, 0, 0, 0};   // k_first, k_rest, v_first, v_rest: Σ (x − x̂)²
    double norm[4] = {0, 0, 0, 0};  // Σ x²
  };
  std::map<std::int64_t, std::map<std::int64_t, Window>> layers;  // layer → window index → sums
  // Adds `other`'s windows; throws naming `source` when a layer already holds one of them.
  void merge(const KvErrorSums& other, const std::string& source);
};

// The report of QuantizedKvCache::error_report from `sums`: `head` ({"format", "keep_first",
// "rotation" when hadamard}) followed by "layers" and "mean"; each layer's sums added in window order.
nlohmann::json kv_error_report(const KvErrorSums& sums, nlohmann::json head);

class QuantizedKvCache : public KvCacheQuantizer {
 public:
  explicit QuantizedKvCache(KvCacheSpec spec);
  // k, v [B, Hkv, L, hd] of any floating dtype and device (anything else is refused naming the
  // layer): float32 on the CPU through the row kernels, the rest through quant/kv_cache_tensor.h's
  // tensor operations (the same values bit for bit, in float32).
  void apply(std::int64_t layer, at::Tensor& k, at::Tensor& v) const override;

  const KvCacheSpec& spec() const { return spec_; }
  // {"format", "keep_first", "layers": [{"layer", "windows", "k_first", "k_rest", "v_first",
  //  "v_rest"}, ...] ascending, "mean": {"k_first", "k_rest", "v_first", "v_rest"} over layers};
  // each value ‖x − x̂‖_F / ‖x‖_F over position 0 ("first") or positions ≥ 1 ("rest") of every
  // head and window seen (0 where ‖x‖ = 0; null before any window).
  nlohmann::json error_report() const;
  void reset_errors() const;
  // The global window indices of the rows (axis 0) of the batches apply() sees next, until the next
  // call (the evaluator's begin_batch). Without it, each layer numbers its windows 0, 1, … as they come.
  void begin_windows(std::vector<std::int64_t> windows) const;
  // The sums so far, and sums of windows run elsewhere (an interrupted run's state) added to them.
  KvErrorSums error_sums() const;
  void add_error_sums(const KvErrorSums& sums, const std::string& source) const;

 private:
  using Window = KvErrorSums::Window;
  // One tensor's rows round-tripped into a new contiguous tensor; adds each window's (axis 0) rows
  // to sums[w][offset] (position 0) and sums[w][offset + 1] (the others).
  at::Tensor round_trip(std::int64_t layer, const at::Tensor& x, const char* what, std::vector<Window>& sums,
                        int offset) const;
  at::Tensor round_trip_rows(const at::Tensor& x, std::vector<Window>& sums, int offset) const;    // float32 CPU
  at::Tensor round_trip_tensor(const at::Tensor& x, std::vector<Window>& sums, int offset) const;  // any other placement
  nlohmann::json report_head() const;

  KvCacheSpec spec_;
  mutable std::mutex mutex_;
  mutable std::vector<std::int64_t> batch_windows_;
  mutable KvErrorSums sums_;
};

}  // namespace qeval
