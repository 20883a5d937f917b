#include "eval/rounding_band.h"

#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "common/error.h"
#include "common/hash.h"
#include "eval/schemes.h"
#include "model/linear.h"
#include "quant/quantized_linear.h"

namespace qeval {
namespace {

// Noise tables: one ring of kTableSize uniform values in [−1, 1] per window, drawn from a generator
// seeded by (variant seed, window), from which each linear reads L·K consecutive values starting
// at its own offset (a hash of its name), wrapping around. Drawing L·K values per linear and
// window cost about what the forward passes cost; a ring of 2¹⁶ is drawn in ~0.2 ms, so it is
// drawn again whenever the batch changes. The purpose needs no independence between linears or
// between the ring's turns: each value only has to move by a few ulps.
constexpr std::int64_t kTableSize = 1 << 16;

struct BatchWindows {
  std::vector<std::int64_t> indices;  // the global window indices of the batch going through now
  std::vector<at::Tensor> tables;     // their noise tables, drawn at begin_batch
};

at::Tensor noise_table(std::uint64_t seed, std::int64_t window) {
  Hasher h;
  h.update_value(seed);
  h.update_value(window);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(h.digest());
  return at::rand({kTableSize}, generator, at::TensorOptions().dtype(at::kFloat)).mul_(2).sub_(1);
}

// n values of the ring from `offset` on, wrapping around (and repeating when n exceeds the ring).
at::Tensor ring_slice(const at::Tensor& table, std::int64_t offset, std::int64_t n) {
  std::vector<at::Tensor> parts;
  std::int64_t at = offset % kTableSize;
  while (n > 0) {
    const std::int64_t take = std::min(n, kTableSize - at);
    parts.push_back(table.narrow(0, at, take));
    n -= take;
    at = 0;
  }
  return parts.size() == 1 ? parts.front() : at::cat(parts);
}

// x ⊙ (1 + ε·u) into the wrapped linear, u from the window's noise table: the same noise for a
// window whatever its batch, chunk, shard or device.
class RoundingJitter final : public LinearDecorator {
 public:
  RoundingJitter(std::shared_ptr<const Linear> inner, double eps, std::uint64_t linear_key,
                 std::shared_ptr<const BatchWindows> windows)
      : LinearDecorator(std::move(inner)), eps_(eps), linear_key_(linear_key), windows_(std::move(windows)) {}

  at::Tensor forward(const at::Tensor& x) const override {
    TORCH_CHECK(x.dim() == 3, "RoundingJitter: expected [B, L, K]");
    const std::int64_t B = x.size(0), L = x.size(1), K = x.size(2);
    TORCH_CHECK(static_cast<std::int64_t>(windows_->tables.size()) == B, "RoundingJitter: ", B,
                " rows but the batch named ", windows_->tables.size(), " windows");
    const std::int64_t offset = static_cast<std::int64_t>(linear_key_ % static_cast<std::uint64_t>(kTableSize));
    std::vector<at::Tensor> factors;
    for (std::int64_t b = 0; b < B; ++b)
      factors.push_back(ring_slice(windows_->tables[static_cast<std::size_t>(b)], offset, L * K).reshape({L, K}));
    const at::Tensor u = at::stack(factors).to(x.device(), x.scalar_type());
    return inner_->forward(x * (u * eps_ + 1));
  }

 private:
  std::shared_ptr<const Linear> with_inner(std::shared_ptr<const Linear> inner) const override {
    return std::make_shared<RoundingJitter>(std::move(inner), eps_, linear_key_, windows_);
  }
  double eps_;
  std::uint64_t linear_key_;
  std::shared_ptr<const BatchWindows> windows_;
};

std::uint64_t key_of(const std::string& linear_name) {
  Hasher h;
  h.update(linear_name);
  return h.digest();
}

// The same jitter on a quantised cache's input (issue 62): K and V [B, Hkv, L, hd] times
// (1 + ε·u) before the scheme's own cache quantiser rounds them, u from the window's table at an
// offset of the layer's own ("layers.<i>.kv_cache.k" / ".v").
class KvCacheJitter final : public KvCacheQuantizer {
 public:
  KvCacheJitter(std::shared_ptr<const KvCacheQuantizer> inner, double eps, std::shared_ptr<const BatchWindows> windows)
      : inner_(std::move(inner)), eps_(eps), windows_(std::move(windows)) {}

  void apply(std::int64_t layer, at::Tensor& k, at::Tensor& v) const override {
    k = jittered(k, fmt::format("layers.{}.kv_cache.k", layer));
    v = jittered(v, fmt::format("layers.{}.kv_cache.v", layer));
    inner_->apply(layer, k, v);
  }

 private:
  at::Tensor jittered(const at::Tensor& x, const std::string& name) const {
    const std::int64_t B = x.size(0), n = x.numel() / std::max<std::int64_t>(B, 1);
    TORCH_CHECK(static_cast<std::int64_t>(windows_->tables.size()) == B, "KvCacheJitter: ", B,
                " rows but the batch named ", windows_->tables.size(), " windows");
    const std::int64_t offset = static_cast<std::int64_t>(key_of(name) % static_cast<std::uint64_t>(kTableSize));
    std::vector<at::Tensor> factors;
    for (std::int64_t b = 0; b < B; ++b)
      factors.push_back(ring_slice(windows_->tables[static_cast<std::size_t>(b)], offset, n).reshape(x.sizes().slice(1)));
    const at::Tensor u = at::stack(factors).to(x.device(), x.scalar_type());
    return x * (u * eps_ + 1);
  }

  std::shared_ptr<const KvCacheQuantizer> inner_;
  double eps_;
  std::shared_ptr<const BatchWindows> windows_;
};

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
  use_rewrite(variant, rewrite, config);
  jitter_quantised_inputs(variant, seed, eps);
  rewrite_out = rewrite;
  return variant;
}

void jitter_quantised_inputs(EvalScheme& scheme, std::uint64_t seed, double eps) {
  QEVAL_CHECK(eps > 0 && eps < 1e-3, "--rounding-band-eps: expected a relative perturbation in (0, 1e-3), got {}", eps);
  auto windows = std::make_shared<BatchWindows>();
  auto inner_wrap = scheme.wrap_block;
  scheme.wrap_block = [eps, windows, inner_wrap](const Block& block) {
    Block wrapped = inner_wrap ? inner_wrap(block) : block;
    for (const auto& named : block.linears())
      if (dynamic_cast<const QuantizedLinear*>(named.linear.get()))
        wrapped.replace_linear(named.name, std::make_shared<RoundingJitter>(named.linear, eps, key_of(named.name), windows));
    if (block.kv_cache()) wrapped.set_kv_cache(std::make_shared<KvCacheJitter>(block.kv_cache(), eps, windows));
    return wrapped;
  };
  if (scheme.rewrite_head) {
    // A quantised LM head (--quantize-lm-head) rounds its input like any other quantised linear.
    // Its input is the batch's final-norm output, computed after the last layer's begin_batch, so
    // the tables are the batch's.
    auto inner_head = scheme.rewrite_head;
    scheme.rewrite_head = [eps, windows, inner_head](const std::shared_ptr<const Linear>& full) {
      std::shared_ptr<const Linear> head = inner_head(full);
      if (!dynamic_cast<const QuantizedLinear*>(head.get())) return head;
      return std::shared_ptr<const Linear>(std::make_shared<RoundingJitter>(head, eps, key_of("lm_head"), windows));
    };
  }
  auto inner_begin = scheme.begin_batch;
  scheme.begin_batch = [seed, windows, inner_begin](const std::vector<std::int64_t>& indices) {
    // Called before each layer for the same batch: the tables are drawn once per batch.
    if (windows->indices != indices || windows->tables.size() != indices.size()) {
      windows->indices = indices;
      windows->tables.clear();
      for (std::int64_t w : indices) windows->tables.push_back(noise_table(seed, w));
    }
    if (inner_begin) inner_begin(indices);
  };
}

double rounding_eps_floor(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble: return std::ldexp(1.0, -54);
    case at::kHalf: return std::ldexp(1.0, -12);
    case at::kBFloat16: return std::ldexp(1.0, -9);
    default: return std::ldexp(1.0, -25);  // float32
  }
}

void check_rounding_eps(double eps, at::ScalarType dtype, const std::string& option) {
  const double floor = rounding_eps_floor(dtype);
  // The factor's ε is the dtype's own: a float32 ε just above 2^-25 rounds to 2^-25 itself.
  const double effective = dtype == at::kDouble ? eps : static_cast<double>(static_cast<float>(eps));
  const std::string name = dtype == at::kDouble ? "float64" : dtype == at::kHalf ? "float16" : dtype == at::kBFloat16 ? "bfloat16" : "float32";
  QEVAL_CHECK(effective > floor,
              "{} {}: moves no {} input (1 + ε·u rounds to 1 for every u in [-1, 1] while ε <= 2^{} = {:.3g}), so every "
              "rounding variant would be the scheme itself and the band exactly 0; the smallest ε that moves inputs is "
              "just above 2^{}, e.g. 2^{} = {:.3g} (default 2^-22)",
              option, eps, name, std::ilogb(floor), floor, std::ilogb(floor), std::ilogb(floor) + 1, 2 * floor);
}

}  // namespace qeval
