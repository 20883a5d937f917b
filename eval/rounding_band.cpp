#include "eval/rounding_band.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "common/error.h"
#include "common/hash.h"
#include "model/linear.h"
#include "quant/quantized_linear.h"

namespace qeval {
namespace {

// The global window indices of the batch going through the layers now (set by begin_batch).
struct BatchWindows {
  std::vector<std::int64_t> indices;
};

// x ⊙ (1 + ε·u) into the wrapped linear, u drawn per window row from a generator seeded by
// (variant seed, window, linear): the same noise for a window whatever its batch, chunk, shard
// or device.
class RoundingJitter final : public LinearDecorator {
 public:
  RoundingJitter(std::shared_ptr<const Linear> inner, std::uint64_t seed, double eps, std::uint64_t linear_key,
                 std::shared_ptr<const BatchWindows> windows)
      : LinearDecorator(std::move(inner)), seed_(seed), eps_(eps), linear_key_(linear_key), windows_(std::move(windows)) {}

  at::Tensor forward(const at::Tensor& x) const override {
    TORCH_CHECK(x.dim() == 3, "RoundingJitter: expected [B, L, K]");
    const std::int64_t B = x.size(0), L = x.size(1), K = x.size(2);
    TORCH_CHECK(static_cast<std::int64_t>(windows_->indices.size()) == B, "RoundingJitter: ", B,
                " rows but the batch named ", windows_->indices.size(), " windows");
    std::vector<at::Tensor> factors;
    for (std::int64_t b = 0; b < B; ++b) {
      Hasher h;
      h.update_value(seed_);
      h.update_value(windows_->indices[static_cast<std::size_t>(b)]);
      h.update_value(linear_key_);
      at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(h.digest());
      const at::Tensor u = at::rand({L, K}, generator, at::TensorOptions().dtype(at::kFloat)) * 2 - 1;
      factors.push_back(u.mul_(static_cast<float>(eps_)).add_(1.0f));
    }
    const at::Tensor factor = at::stack(factors).to(x.device(), x.scalar_type());
    return inner_->forward(x * factor);
  }

 private:
  std::shared_ptr<const Linear> with_inner(std::shared_ptr<const Linear> inner) const override {
    return std::make_shared<RoundingJitter>(std::move(inner), seed_, eps_, linear_key_, windows_);
  }
  std::uint64_t seed_;
  double eps_;
  std::uint64_t linear_key_;
  std::shared_ptr<const BatchWindows> windows_;
};

std::uint64_t key_of(const std::string& linear_name) {
  Hasher h;
  h.update(linear_name);
  return h.digest();
}

}  // namespace

std::string rounding_variant_name(const std::string& scheme, std::uint64_t seed) {
  return fmt::format("{}~r{}", scheme, seed);
}

EvalScheme rounding_variant(const EvalScheme& scheme, const SchemeSpec& spec, const std::vector<std::string>& linears,
                            const ModelConfig& config, std::uint64_t seed, double eps,
                            std::shared_ptr<SchemeRewrite>& rewrite_out) {
  QEVAL_CHECK(seed >= 1, "rounding_variant: seeds start at 1, got {}", seed);
  auto rewrite = std::make_shared<SchemeRewrite>(spec, linears);
  EvalScheme variant;
  variant.name = rounding_variant_name(scheme.name, seed);
  variant.description = scheme.description;
  variant.description["rounding_band_of"] = scheme.name;
  variant.description["rounding_seed"] = seed;
  variant.description["rounding_eps"] = eps;
  variant.rewrite_block = [rewrite](const Block& full) { return rewrite->rewrite(full); };
  variant.rewrites_layer = [rewrite, config](std::int64_t layer) { return rewrite->selects_in_layer(config, layer); };
  if (rewrite->selects("lm_head"))
    variant.rewrite_head = [rewrite](const std::shared_ptr<const Linear>& head) { return rewrite->rewrite_head(head); };
  jitter_quantised_inputs(variant, seed, eps);
  rewrite_out = rewrite;
  return variant;
}

void jitter_quantised_inputs(EvalScheme& scheme, std::uint64_t seed, double eps) {
  QEVAL_CHECK(eps > 0 && eps < 1e-3, "--rounding-band-eps: expected a relative perturbation in (0, 1e-3), got {}", eps);
  auto windows = std::make_shared<BatchWindows>();
  auto inner_wrap = scheme.wrap_block;
  scheme.wrap_block = [seed, eps, windows, inner_wrap](const Block& block) {
    Block wrapped = inner_wrap ? inner_wrap(block) : block;
    for (const auto& named : block.linears())
      if (dynamic_cast<const QuantizedLinear*>(named.linear.get()))
        wrapped.replace_linear(named.name,
                               std::make_shared<RoundingJitter>(named.linear, seed, eps, key_of(named.name), windows));
    return wrapped;
  };
  auto inner_begin = scheme.begin_batch;
  scheme.begin_batch = [windows, inner_begin](const std::vector<std::int64_t>& indices) {
    windows->indices = indices;
    if (inner_begin) inner_begin(indices);
  };
}

}  // namespace qeval
