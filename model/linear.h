// Linear: the unit quantisation rewrites. The transformer calls every projection through this
// interface, so quant/ can swap a FloatLinear for a quantised one without touching the model.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace qeval {

class PlacementCache;

class Linear {
 public:
  virtual ~Linear() = default;
  // x: [B, L, in] float → [B, L, out]. Axis 0 is the sequence axis: implementations with
  // dynamic activation scales compute them per sequence, so results do not depend on B.
  virtual at::Tensor forward(const at::Tensor& x) const = 0;
  virtual std::int64_t in_features() const = 0;
  virtual std::int64_t out_features() const = 0;
  // Bytes held by the weights (and scales/zeros) as stored for execution.
  virtual std::int64_t weight_bytes() const = 0;
  // Short description for records: "fp32", "int8 w:channel a:tensor, kernel onednn", ...
  virtual std::string describe() const = 0;
  // This layer on the cache's device and compute dtype (model/placement.h), sharing the cache's
  // copies. Layers that cannot run elsewhere refuse, naming themselves.
  virtual std::shared_ptr<const Linear> placed(PlacementCache& cache) const;
};

// A Linear that wraps another and changes only what forward does around it (watching its input
// or output: statistics, tests); sizes, bytes and describe() are the wrapped layer's, so records
// of a wrapped model read as before.
class LinearDecorator : public Linear {
 public:
  explicit LinearDecorator(std::shared_ptr<const Linear> inner);  // throws on null
  std::int64_t in_features() const override { return inner_->in_features(); }
  std::int64_t out_features() const override { return inner_->out_features(); }
  std::int64_t weight_bytes() const override { return inner_->weight_bytes(); }
  std::string describe() const override { return inner_->describe(); }
  const std::shared_ptr<const Linear>& inner() const { return inner_; }
  // The wrapped layer placed, wrapped again by with_inner.
  std::shared_ptr<const Linear> placed(PlacementCache& cache) const override;

 protected:
  // The same decorator around another layer (its placed copy); the default refuses.
  virtual std::shared_ptr<const Linear> with_inner(std::shared_ptr<const Linear> inner) const;
  std::shared_ptr<const Linear> inner_;
};

// y = x Wᵀ + b in the weights' float dtype. On the CPU one GEMM per sequence (batch-size
// independent bits); on a GPU one GEMM over every row of the batch (cuBLAS may round a row
// differently for another row count: the record says so, tests/eval bound the difference).
class FloatLinear final : public Linear {
 public:
  // `weight_max_abs`: max |weight| when whoever made the weight has read it whole (the read's
  // finiteness check does, eval/evaluator.cpp): a per-tensor quantiser then needs no pass of its
  // own for the scale. It must be the maximum of exactly `weight`: never pass one across a change.
  FloatLinear(at::Tensor weight /*[out, in]*/, at::Tensor bias /*[out] or undefined*/,
              std::optional<float> weight_max_abs = std::nullopt);
  at::Tensor forward(const at::Tensor& x) const override;
  std::int64_t in_features() const override { return weight_.size(1); }
  std::int64_t out_features() const override { return weight_.size(0); }
  std::int64_t weight_bytes() const override;
  std::string describe() const override;
  std::shared_ptr<const Linear> placed(PlacementCache& cache) const override;
  const at::Tensor& weight() const { return weight_; }
  const at::Tensor& bias() const { return bias_; }
  const std::optional<float>& weight_max_abs() const { return weight_max_abs_; }

 private:
  at::Tensor weight_;
  at::Tensor bias_;
  std::optional<float> weight_max_abs_;
};

}  // namespace qeval
