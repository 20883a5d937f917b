// AWQ (Lin et al., 2023): per input channel scales s for the linears that share one input (a
// "mapping": the previous op, e.g. an RMSNorm, and its balance layers, e.g. q/k/v), chosen by a grid
// search so that quantising W·diag(s) and feeding it x·diag(1/s) loses least at the output of the
// mapping's parent module; then s is folded into the model (previous op ÷ s, balance columns × s),
// which leaves the full-precision function unchanged.
//
// As llm-compressor 0.14.0 computes it (modifiers/transform/awq/base.py), the default here:
//   x_mean   per input channel mean |x| over every calibration token: each batch's |x| (inputs'
//            dtype) summed over its tokens in float32, the sums added across batches, divided by
//            the token count (AwqActivationMean). Taken at the first balance layer's input.
//   w_mean   per input channel mean over every balance row of |w| / (max |w| in its group + 1e-6),
//            groups of `group_size` consecutive columns, summed in float64 (awq_weight_mean).
//   grid     duo_scaling on (the default): (0, off) then ratios i / (n_grid − 2), i = 0 … n_grid − 2,
//            with duo (20 points, the last ratio 1); off: i / (n_grid − 1), i < n_grid; both: ratios
//            i / (n/2 − 1), i < n/2 = n_grid / 2, each off then on.
//   scales   duo: x_mean^r / (w_mean^(1−r) + 1e-4), clamped to >= 1e-4 (float64, w_mean's dtype);
//            off: x_mean^r clamped to >= 1e-4 (x_mean's dtype, float32); then s / sqrt(max s · min s),
//            and any inf or NaN entry becomes 1 (awq_scales_at).
//   loss     balance weights W_i → Q(W_i·s)/s (W·s in the scales' dtype, then the weights' dtype),
//            the parent's outputs for every batch against the full-precision ones: Σ_batches
//            Σ (y − ŷ)² (float32 per batch, float32 running sum) / Σ_batches numel. The best point
//            is the first with the smallest loss (strictly smaller replaces); a NaN loss never wins.
//   Q        compressed-tensors 0.19's calculate_qparams + fake_quantize with a memoryless min/max
//            observer (awq_quantize): lo = min(min w, 0), hi = max(max w, 0) per row and group;
//            asymmetric s = (hi − lo) / (2^b − 1), z = round(clamp(−2^(b−1) − lo / s, −2^(b−1),
//            2^(b−1) − 1)), q = round(clamp(w / s + z, …)), ŵ = (q − z) · s; symmetric
//            s = max(|lo|, hi) / ((2^b − 1) / 2), z = 0; s = 0 becomes the dtype's epsilon. round()
//            is half to even. Codes and zeros are returned unsigned (+ 2^(b−1)): ŵ = (q − z) · s.
//   clip     none: llm-compressor 0.14 has no clipping search (AutoAWQ's: awq_search_clip below).
//
// `reference = autoawq` follows AutoAWQ 0.2.9 (awq/quantize/quantizer.py) where it differs:
//   grid     ratios i / n_grid, i < n_grid (the last ratio 0.95), every point duo or every point not;
//   w_mean   mean over rows in the weights' dtype (float32 here) of the concatenated balance weights;
//   Q        pseudo_quantize_tensor: lo = min w, hi = max w (0 need not be in range), asymmetric
//            s = max(hi − lo, 1e-5) / (2^b − 1), z = clamp(−round(lo / s), 0, 2^b − 1),
//            q = clamp(round(w / s) + z, 0, 2^b − 1); symmetric s = max(max |w|, 1e-5) / (2^(b−1) − 1),
//            q = clamp(round(w / s), −2^(b−1), 2^(b−1) − 1) (codes returned + 2^(b−1), zeros 2^(b−1));
//   loss     Σ (y − ŷ)² summed in float32 per batch, added in float64, / numel.
//
// Clipping (AutoAWQ only; llm-compressor 0.14 has none): after the scales are folded, AutoAWQ's
// auto_clip picks for each linear except q/k (awq_clip_skips) and each row and group a threshold
// m = max |w| · (1 − i / n_grid), i < max_shrink · n_grid, minimising the mean over sampled tokens of
// (Σ_group x·Q(clamp(w, −m, m)) − Σ_group x·w)² (awq_search_clip), then clamps the weights to ±m
// (awq_apply_clip). Q is the options' quantiser (AutoAWQ's own under reference = autoawq).
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qeval {

enum class AwqDuoScaling { off, on, both };
enum class AwqReference { llm_compressor, autoawq };

struct AwqOptions {
  int n_grid = 20;
  AwqDuoScaling duo_scaling = AwqDuoScaling::on;
  int bits = 4;                    // 2 … 8
  std::int64_t group_size = 128;   // 0: per channel (one group of every column)
  bool symmetric = false;          // W4A16_ASYM: false
  AwqReference reference = AwqReference::llm_compressor;
};

std::string to_string(AwqDuoScaling v);  // "off" | "on" | "both"
std::string to_string(AwqReference v);   // "llm-compressor" | "autoawq"

// The per input channel mean |x| (x_mean above), accumulated batch by batch.
class AwqActivationMean {
 public:
  explicit AwqActivationMean(std::int64_t channels);
  void add(const at::Tensor& x);  // x [..., K]: one batch of the first balance layer's inputs
  at::Tensor mean() const;        // [K] float32; throws when no token was added
  std::int64_t tokens() const { return tokens_; }

 private:
  at::Tensor sum_;  // [K] float32
  std::int64_t tokens_ = 0;
};

// w_mean above: [K] float64 (llm-compressor) or the weights' dtype (AutoAWQ). Weights [N_i, K].
at::Tensor awq_weight_mean(const std::vector<at::Tensor>& balance_weights, const AwqOptions& options);

struct AwqGridPoint {
  double ratio = 0;
  bool duo = false;
  double loss = 0;  // filled by the search
};

// The grid points, in the reference's order (losses 0).
std::vector<AwqGridPoint> awq_grid(const AwqOptions& options);

// The scales of one grid point, normalised and with inf/NaN set to 1: [K].
at::Tensor awq_scales_at(const at::Tensor& x_mean, const at::Tensor& w_mean, double ratio, bool duo);

struct AwqQuantized {
  at::Tensor codes;        // [N, K] uint8, unsigned codes in [0, 2^bits − 1]
  at::Tensor scales;       // [N, G] weights' dtype
  at::Tensor zeros;        // [N, G] weights' dtype, integral, unsigned (ŵ = (q − z) · s)
  at::Tensor dequantized;  // [N, K] weights' dtype
};

// The weight quantiser inside the search (and llm-compressor's final W4A16 quantisation):
// weight [N, K] float32 or float64. K need not be a multiple of group_size under llm-compressor's
// rule: the last group is then shorter (G = ⌈K / g⌉; compressed-tensors itself refuses K > g that g
// does not divide), as qeval's other group schemes have it; AutoAWQ's rule needs whole groups.
AwqQuantized awq_quantize(const at::Tensor& weight, const AwqOptions& options, const std::string& name = "weight");

// The mapping being searched: its balance layers' full-precision weights ([N_i, K], one dtype) and
// the activation statistic of their common input ([K], AwqActivationMean::mean()).
struct AwqMappingInputs {
  std::vector<at::Tensor> balance_weights;
  at::Tensor x_mean;
  std::string name = "mapping";  // for errors
};

// The caller's forward of the mapping's parent module over every calibration batch, with the
// balance layers' weights replaced by the given ones (same order and shapes as balance_weights);
// the other weights of the parent stay as they are. One output tensor per batch.
using AwqParentForward = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& balance_weights)>;

struct AwqSearchResult {
  std::vector<AwqGridPoint> grid;  // every point with its loss
  std::size_t best_index = 0;
  at::Tensor scales;               // [K] the best point's scales (float64 for a duo point under llm-compressor)
  at::Tensor w_mean;               // [K]
  double initial_loss = 0;         // the first grid point's loss
  double best_loss = 0;
};

// The grid search. The full-precision outputs are parent_forward(balance_weights). Throws naming the
// mapping when shapes disagree, an output's shape changes, or no grid point has a finite loss.
AwqSearchResult awq_search_scales(const AwqMappingInputs& inputs, const AwqParentForward& parent_forward,
                                  const AwqOptions& options = {});

// The common case with no model: the parent's output is the concatenation, on the last dimension,
// of the balance linears' outputs x · W_iᵀ (no bias), for every batch x [..., K] of `batches`.
AwqSearchResult awq_search_scales_linear(const AwqMappingInputs& inputs, const std::vector<at::Tensor>& batches,
                                         const AwqOptions& options = {});

// The loss of one grid point (above): fp and quantised outputs, one tensor per batch.
double awq_output_loss(const std::vector<at::Tensor>& full_precision, const std::vector<at::Tensor>& quantised,
                       AwqReference reference = AwqReference::llm_compressor);

// Folds scales [K] into the model, in place, as llm-compressor's _smooth does:
//   previous_weight [K] (a norm's gain): ÷ s;  previous_weight [M, ...] with M >= K (a linear whose
//   last K output rows are the balance layers' input, e.g. v_proj before o_proj): those rows ÷ s;
//   previous_bias (undefined when none) [M]: its last K entries ÷ s;
//   each balance weight [N_i, K]: columns × s.
// Each product is computed in the promoted dtype and stored in the tensor's own.
void awq_fold_scales(const at::Tensor& scales, const at::Tensor& previous_weight, const at::Tensor& previous_bias,
                     const std::vector<at::Tensor>& balance_weights, const std::string& name = "mapping");

struct AwqClipOptions {
  int n_grid = 20;
  double max_shrink = 0.5;             // thresholds down to max |w| · (1 − max_shrink) (exclusive)
  std::int64_t n_sample_token = 512;   // every (tokens / n_sample_token)-th token is used
  std::int64_t row_batch = 64;         // rows per pass (memory only: results do not depend on it)
};

// AutoAWQ's rule for the linears it does not clip (names containing q_, k_, query, key or Wqkv).
bool awq_clip_skips(const std::string& linear_name);

// The thresholds m [N, G] (weights' dtype) for weight [N, K] (already scaled) and its inputs
// [..., K] (already divided by the scales), as AutoAWQ 0.2.9's _compute_best_clip.
at::Tensor awq_search_clip(const at::Tensor& weight, const at::Tensor& inputs, const AwqOptions& options,
                           const AwqClipOptions& clip = {}, const std::string& name = "weight");

// weight [N, K] ← clamp(weight, −m, m) per row and group, in place (AutoAWQ's apply_clip).
void awq_apply_clip(const at::Tensor& weight, const at::Tensor& max_val, const std::string& name = "weight");

}  // namespace qeval
