// QuantizedLinear: a Linear whose weights are quantised once at construction and stored packed,
// with dynamic activation quantisation computed per sequence (axis 0 of x), so outputs never
// depend on the batch size (DESIGN.md §5).
//
// Two execution paths, equal to float rounding (tests/quant):
//   reference  activations quantised and dequantised in float, weights dequantised, at::linear.
//   kernel     int8 weights × int8 activations (per-tensor or per-token scales): activations
//              quantised by kernels/int8_quantize, then kernels/int8_gemm (int32 sums, scales
//              after); 4-bit weights: kernels/w4_gemm on float activations (quantised and
//              dequantised first when the scheme quantises them).
// On a GPU (placed(), model/placement.h) the same maths runs in the compute dtype: the int8
// kernel path is kernels/int8_linear (fused quantiser, integer GEMM, epilogue; coarse output
// quantisation inside it), one GEMM over all B·L rows; the reference path fake-quantises in
// float32, rounds to the compute dtype and runs one float GEMM on the dequantised weight (cached
// at placement); 4-bit weights run kernels/w4_linear in fp16/bf16 and the dequantised weight in
// fp32. Integer sums are exact there too; float GEMMs over all rows may round differently for
// another batch size (the record says so).
//
// Output-activation quantisation (coarse) is applied to the output, bias included, per sequence,
// identically on both paths. Outputs are bit-identical whatever the batch size: float GEMMs run
// once per sequence, and the int8 GEMM's integer sums are exact.
//
// Kept tokens (scheme keep_tokens, k > 0): per sequence, k positions (the first k, or the k
// largest input rows by ||x||_2, ties to the lower position) take the full-precision layer's
// output, and the other L − k rows run the path above as a sequence of their own, so their
// input and output scales come from those rows only. The kept rows are the rows of the
// full-precision op itself (a FloatLinear over the whole input, then the kept rows picked): a
// GEMM over only the k kept rows is not enough, since BLAS results for a row change with the
// row count M (measured here: every M tried differed in the last bits from M = L). That costs
// one float GEMM over all rows besides the quantised one, and buys: kept rows equal the
// full-precision layer bit for bit, k ≥ L equals full precision bit for bit, and k = 0 is the
// plain scheme bit for bit (nothing of this runs). Which positions were kept is logged per layer
// (kept_positions()) so records can say so.
//
// Outlier decomposition (scheme outlier_threshold T, LLM.int8()): per sequence, O = the input
// features j with max_l |x[l, j]| >= T (compared in double), and
//   y = [the vector-wise path on X with the columns in O zeroed] + X[:, O] W[:, O]^T (fp32 GEMM)
// The zeroed columns quantise to code 0 and contribute exactly 0 to the integer sums, so the
// kernel path runs the existing int8 GEMM over the full K (one GEMM over all B·L rows, exact);
// the reference path dequantises the zeroed X and runs at::linear per sequence; the float part
// (gathered columns of x and of the fp32 weight, one GEMM per sequence) is the same code on both
// paths and is added after, so the bias counts once. With O empty nothing of this runs (T = +inf
// is the vector-wise scheme bit for bit); with O every feature the sequence takes the
// full-precision layer's own output (T = 0 is full precision bit for bit). Which features were
// outliers is logged per layer (outlier_features()).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "model/linear.h"
#include "quant/formats/ggml/activations.h"
#include "quant/packed_weights.h"
#include "quant/schemes/spec.h"

namespace qeval {

enum class ExecutionPath { reference, kernel };
std::string to_string(ExecutionPath p);

// Empty when `spec` can run on the kernel path; otherwise why not, in words for records, e.g.
// "per-feature activation scales cannot be factored out of an integer GEMM".
std::string kernel_path_unavailable_reason(const SchemeSpec& spec);

struct QuantizedLinearLog;

class QuantizedLinear final : public Linear {
 public:
  // weight [out, in] float32, bias [out] float32 or undefined. Throws when `path` is kernel and
  // kernel_path_unavailable_reason(spec) is not empty. `name` is the canonical linear name.
  // `log`: where it logs (null: a log of its own). `weight_max_abs`: max |weight| when the caller
  // knows it (FloatLinear::weight_max_abs), which spares a per-tensor scale its own pass.
  QuantizedLinear(const std::string& name, const at::Tensor& weight, const at::Tensor& bias, const SchemeSpec& spec,
                  ExecutionPath path, std::shared_ptr<QuantizedLinearLog> log = nullptr,
                  std::optional<float> weight_max_abs = std::nullopt);
  // A new empty log to share between layers rebuilt for one linear.
  static std::shared_ptr<QuantizedLinearLog> make_log();

  at::Tensor forward(const at::Tensor& x /*[B, L, in]*/) const override;  // → [B, L, out]
  std::int64_t in_features() const override { return in_; }
  std::int64_t out_features() const override { return out_; }
  std::int64_t weight_bytes() const override;  // packed codes + scales (+ zeros) + bias
  std::string describe() const override;
  std::shared_ptr<const Linear> placed(PlacementCache& cache) const override;

  ExecutionPath path() const { return path_; }
  // The weights as the reference path uses them: [out, in] float32.
  at::Tensor dequantized_weight() const;
  const std::optional<Int8Weight>& int8_weight() const { return int8_; }
  const std::optional<W4Weight>& w4_weight() const { return w4_; }

  // The kernels this layer's forward passes ran, in words (on a GPU: which int8 GEMM or 4-bit
  // path the dispatch chose for each shape seen), for records. Empty before any forward on a GPU.
  std::set<std::string> engines_used() const;
  // The log this layer writes (shared with the layers rebuilt for the same linear).
  const QuantizedLinearLog& log() const { return *log_; }

  const KeepTokens& keep_tokens() const { return keep_; }
  // The positions kept for x [B, L, in]: [B, min(k, L)] int64, ascending within each sequence
  // ([B, 0] when the scheme keeps none). Pure: logs nothing.
  at::Tensor select_kept_positions(const at::Tensor& x) const;

  // Over every forward call since construction or the last reset: the sequences this layer saw
  // and, per position, in how many of them it was kept (bounded by L entries). Empty when the
  // scheme keeps no tokens. Copies of a model share their layers, and so this log.
  struct KeptPositions {
    std::int64_t sequences = 0;
    std::map<std::int64_t, std::int64_t> counts;  // position → sequences in which it was kept
  };
  KeptPositions kept_positions() const;
  void reset_kept_positions() const;

  // The scheme's outlier threshold (nullopt: no decomposition).
  const std::optional<double>& outlier_threshold() const { return outlier_threshold_; }
  // The outlier features of x [B, L, in] under the threshold: [B, in] bool. Pure: logs nothing.
  at::Tensor select_outlier_features(const at::Tensor& x) const;

  // Over every forward call since construction or the last reset: the sequences seen, how many
  // outlier features they had (sum and largest), and per feature in how many sequences it was an
  // outlier (bounded by in_features entries). Empty when the scheme decomposes nothing.
  struct OutlierFeatures {
    std::int64_t sequences = 0;
    std::int64_t total = 0;  // Σ over sequences of |O|
    std::int64_t max = 0;    // max over sequences of |O|
    std::map<std::int64_t, std::int64_t> counts;  // feature → sequences in which it was an outlier
  };
  OutlierFeatures outlier_features() const;
  void reset_outlier_features() const;

 private:
  QuantizedLinear(const QuantizedLinear& source, PlacementCache& cache);  // placed()'s copy
  at::Tensor forward_quantized(const at::Tensor& x) const;  // the scheme's path on every row
  at::Tensor forward_quantized_device(const at::Tensor& x) const;  // the same on a GPU, in its dtype
  at::Tensor forward_keeping(const at::Tensor& x) const;    // kept rows full precision, the rest quantised
  at::Tensor forward_mixed(const at::Tensor& x) const;      // outlier features in fp32, the rest int8
  at::Tensor forward_reference(const at::Tensor& x, const at::Tensor& w /*dequantised [out, in]*/) const;
  // The input activations as the scheme rounds them (dynamic scales, or the static one), x̂.
  at::Tensor quantize_inputs(const at::Tensor& x) const;
  at::Tensor forward_w4_kernel(const at::Tensor& x) const;
  at::Tensor forward_int8_kernel(const at::Tensor& x) const;
  // `--dtype fp64` on the CPU: the scheme's maths with float64 arithmetic (docs/rounding-band.md).
  at::Tensor forward_float64(const at::Tensor& x) const;
  at::Tensor float64_weight() const;  // [out, in], exact

  std::string name_;
  QuantSpec weights_, inputs_, outputs_;
  ExecutionPath path_;
  std::int64_t in_ = 0, out_ = 0;
  std::optional<Int8Weight> int8_;  // exactly one of int8_, w4_, float_weight_ holds the weight
  std::optional<W4Weight> w4_;
  std::int64_t calibrated_bytes_ = 0;  // GPTQ / AWQ weights: what they take packed as their checkpoints pack them
  at::Tensor float_weight_;         // weights not quantised (activation-only schemes), or dequantised
                                    // once (fp8, mx, nvfp4: no CPU arithmetic for those elements)
  at::Tensor bias_;                 // [out] float32 or undefined, kept in full precision
  // Placed on a GPU only: the dequantised weight [out, in] and the bias in the compute dtype, for
  // the float GEMMs (reference path; 4-bit weights in fp32).
  at::Tensor device_weight_, device_bias_;
  std::string engine_;  // what describe() names as the engine once placed; empty on the CPU
  KeepTokens keep_;
  std::optional<FloatLinear> float_op_;  // the full-precision layer, when keep_ or outlier_threshold_ is set
  std::optional<double> outlier_threshold_;
  std::optional<float> static_input_scale_;  // a calibrated input scale (spec.calibrated), if static
  // Kind ggml with "activations": "gguf-q8": the block type llama.cpp's CPU product rounds this
  // layer's inputs to (quant/formats/ggml/activations.h).
  std::optional<GgmlActivationType> ggml_activations_;
  std::shared_ptr<QuantizedLinearLog> log_;
};

// What a quantised layer logs while it runs (kernels used, kept positions, outlier features).
// Layers rebuilt for the same linear (a plan that quantises a layer once per chunk of windows,
// eval/evaluator.h) share one log, so the record counts every window whichever plan ran.
struct QuantizedLinearLog {
  mutable std::mutex mutex;
  std::set<std::string> engines_used;
  QuantizedLinear::KeptPositions kept;
  QuantizedLinear::OutlierFeatures outliers;
  std::int64_t rows = 0;  // token rows through forward (for an expert: the tokens routed to it)
};

}  // namespace qeval
