// Optimizers over a list of named at::Tensors whose .grad() autograd filled: SGD (momentum),
// Adam (L2 weight decay), AdamW (decoupled weight decay) and OrthoAdam (DESIGN.md §8, Kaul et
// al. Algorithm 1). All run in place under NoGradGuard; state is a set of named tensors plus a
// JSON header, so it can be saved to safetensors and resumed bit for bit.
//
// Adam family update for one tensor p with gradient g at step t (1-based), learning rate lr:
//   g  ← g + wd·p                        (L2 weight decay: adam, orthoadam with weight_decay_mode "l2")
//   p  ← p · (1 − lr·wd)                 (decoupled: adamw, orthoadam with weight_decay_mode "decoupled")
//   g' = Q g                             (OrthoAdam only; Q = ⊗ per-axis orthogonal, train/orthogonal.h)
//   m  ← β1 m + (1 − β1) g'              (m, v live in the rotated basis)
//   v  ← β2 v + (1 − β2) g'²
//   u' = m / (sqrt(v) / sqrt(1 − β2^t) + ε)
//   p  ← p − (lr / (1 − β1^t)) · Qᵀ u'
// With Q = I this is exactly the Adam update, operation for operation. (It differs from
// torch.optim.Adam only in rounding: that computes addcdiv(p, m, denom, −step).)
// SGD: g ← g + wd·p; b ← μ b + g (b = g at the first step); p ← p − lr·b.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/orthogonal.h"

namespace qeval::train {

struct NamedParameter {
  std::string name;
  at::Tensor tensor;  // a leaf that requires grad; updated in place
};

struct OptimizerOptions {
  std::string kind = "adamw";  // sgd | adam | adamw | orthoadam
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  std::string weight_decay_mode = "auto";  // auto (adamw: decoupled, others: l2) | l2 | decoupled
  double momentum = 0.9;                   // sgd
  // OrthoAdam: transforms come from (transform_seed, parameter name, axis); "random" = dense
  // per axis up to dense_max, blocked randomised Hadamard beyond; "hadamard" forces Hadamard on
  // every axis; "identity" makes OrthoAdam equal Adam (tests).
  std::uint64_t transform_seed = 0;
  std::string transform = "random";
  std::int64_t dense_max = 4096;

  bool decoupled() const;  // resolved weight_decay_mode
  nlohmann::json to_json() const;
  static OptimizerOptions from_json(const nlohmann::json& j, const std::string& source);
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter that has a gradient, with this step's learning rate.
  virtual void step(double lr) = 0;
  // Drops every parameter's gradient (autograd accumulates otherwise).
  void zero_grad();
  std::int64_t steps_taken() const { return step_; }
  const OptimizerOptions& options() const { return options_; }
  const std::vector<NamedParameter>& parameters() const { return params_; }

  // State as named tensors ("<param>.exp_avg", "<param>.exp_avg_sq", "<param>.momentum") and a
  // header {options, step}. Transforms are not stored: they are regenerated from the seed.
  std::map<std::string, at::Tensor> state_tensors() const;
  nlohmann::json state_header() const;
  // Restores state saved by an optimizer of the same kind over parameters of the same names and
  // shapes; throws naming `source` and the tensor otherwise.
  void load_state(const nlohmann::json& header, const std::map<std::string, at::Tensor>& tensors,
                  const std::string& source);

 protected:
  Optimizer(std::vector<NamedParameter> params, OptimizerOptions options);
  std::vector<NamedParameter> params_;
  OptimizerOptions options_;
  std::int64_t step_ = 0;
  // Per parameter, by slot name ("exp_avg", ...); created lazily at the first step.
  std::vector<std::map<std::string, at::Tensor>> state_;
  virtual std::vector<std::string> slots() const = 0;
};

// Validates options (kind, betas in [0, 1), eps > 0, ...) and parameter names (unique).
std::unique_ptr<Optimizer> make_optimizer(std::vector<NamedParameter> params, const OptimizerOptions& options);

}  // namespace qeval::train
