// GPTQ (Frantar et al., 2022): a linear's weights quantised one column at a time, each column's
// rounding error pushed onto the columns not yet quantised through the inverse Hessian of the
// layer's reconstruction error, H = 2/n Σ x xᵀ over the calibration inputs x (quant/calibration/hessian.h).
//
// The solve, as both references do it (llm-compressor 0.14 gptq_quantize.py, AutoGPTQ 0.7.1
// gptq.py fasterquant):
//   1. dead inputs (H_jj = 0): H_jj ← 1 and column j of W ← 0;
//   2. order: none, or columns by descending H_jj (activation order; a stable sort here, so that
//      equal diagonals keep their column order). llm-compressor sorts before step 1 (a dead
//      column's 0 goes last), AutoGPTQ after it (its 1 sorts among the live columns);
//   3. damping: H ← H + λ·mean(diag H)·I (λ = `dampening`, 0.01 by default);
//   4. U = upper Cholesky factor of H⁻¹ (cholesky → cholesky_inverse → cholesky(upper)); when H is
//      not positive definite even so, U = I (round to nearest) and `fell_back_to_rtn` says so;
//   5. blocks of `block_size` columns: inside a block, column i's codes q, the error
//      e = (w − q̂) / U_ii and w_{i..} −= e · U_{i,i..}; after the block, the columns right of it
//      take W_{:,i2:} −= E · U_{i1:i2, i2:} (one matrix product);
//   6. the permutation undone.
// All in the weights' dtype (float32 as the references; float64 for the tests' exact reference).
//
// The group parameters (scale s and zero z for each row and group of `group_size` columns; per
// channel when group_size is 0):
//   original  from the weights as given, before step 1, groups of consecutive original columns
//             (llm-compressor: the weight observer's min/max before GPTQ runs; with activation
//             order, each column keeps its original group: its "weight" / "static" actorder);
//   updated   from the working weights at each group's first column in the order of quantisation,
//             groups of consecutive columns in that order (AutoGPTQ / GPTQModel without
//             static_groups; with activation order that is desc_act, and `group_of_column` is
//             the g_idx a checkpoint stores). AutoGPTQ reads a group that starts inside a block
//             from W as the previous blocks left it, not from the block's working copy; so does
//             this (equal when group_size is a multiple of block_size, as at 128 / 128).
// Per channel, both references take the parameters from the original weights.
//
// The reference whose arithmetic is followed (`reference`), to the bit:
//   llm_compressor  (compressed-tensors' calculate_qparams and fake_quantize) lo = min(min w, 0), hi = max(max w, 0); symmetric
//             s = max(|lo|, hi) / ((2^b − 1) / 2), z = 0, codes in [−2^(b−1), 2^(b−1) − 1]:
//             q = round(clamp(w / s, qmin, qmax)), ŵ = q · s; asymmetric s = (hi − lo) / (2^b − 1),
//             z = round(clamp(qmin − lo / s, qmin, qmax)), q = round(clamp(w / s + z, …)),
//             ŵ = (q − z) · s; s = 0 becomes the dtype's epsilon (z of an all-zero group: 0).
//   autogptq  lo, hi as above; symmetric hi ← max(|lo|, hi) and lo ← −hi when lo < 0;
//             lo = hi = 0 becomes −1, +1; s = (hi − lo) / (2^b − 1), z = 2^(b−1) (symmetric) or
//             round(−lo / s); q = clamp(round(w / s) + z, 0, 2^b − 1), ŵ = s · (q − z).
// round() is half to even. Codes are returned unsigned (q + 2^(b−1) for compressed-tensors' signed
// codes, with z shifted alike), so that ŵ = (q − z) · s for every rule, which is quant/packed_weights.h's
// W4Weight at 4 bits.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace qeval {

enum class GptqOrder { none, descending_hessian };
enum class GptqGroupParams { original, updated };
enum class GptqReference { llm_compressor, autogptq };

struct GptqOptions {
  int bits = 4;                    // 2, 3, 4 or 8
  std::int64_t group_size = 128;   // 0: per channel (one group of every column)
  bool symmetric = true;
  double dampening = 0.01;         // λ, fraction of mean(diag H)
  std::int64_t block_size = 128;
  GptqOrder order = GptqOrder::none;
  GptqGroupParams group_params = GptqGroupParams::original;
  GptqReference reference = GptqReference::llm_compressor;
};

std::string to_string(GptqOrder v);        // "none" | "descending_hessian"
std::string to_string(GptqGroupParams v);  // "original" | "updated"
std::string to_string(GptqReference v);    // "llm-compressor" | "autogptq"

struct GptqResult {
  at::Tensor codes;           // [N, K] uint8, unsigned codes in [0, 2^bits − 1]
  at::Tensor scales;          // [N, G] weights' dtype
  at::Tensor zeros;           // [N, G] weights' dtype, integral
  at::Tensor group_of_column; // [K] int32: the group whose s, z column k uses (g_idx)
  at::Tensor dequantized;     // [N, K] weights' dtype, (q − z) · s
  double loss = 0;            // Σ e² / 2 over every row and column (the references' loss)
  std::int64_t dead_columns = 0;
  bool fell_back_to_rtn = false;
};

// weight [N, K] float32 or float64 (CPU), hessian [K, K] of the same dtype (symmetric; a
// positive semi-definite sum). Throws naming `name` when shapes, dtype or options are wrong.
GptqResult gptq_solve(const at::Tensor& weight, const at::Tensor& hessian, const GptqOptions& options,
                      const std::string& name = "weight");

}  // namespace qeval
