#include "model/forward_context.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace qeval {

const ForwardContext::RopeTable& ForwardContext::rope_for(double theta) const {
  for (const auto& t : rope)
    if (t.theta == theta) return t;
  fail("ForwardContext: no rotary table for base {}", theta);
}

const at::Tensor& ForwardContext::mask_for(std::int64_t window) const {
  for (const auto& m : masks)
    if (m.window == window) return m.bias;
  fail("ForwardContext: no attention mask for window {}", window);
}

ForwardContext make_forward_context(const ModelConfig& config, std::int64_t L, const at::Tensor& like) {
  ForwardContext t;
  t.length = L;
  for (std::int64_t layer = 0; layer < config.n_layers; ++layer) {
    const double theta = config.rope_base(layer);
    const std::int64_t window = config.attention_window(layer);
    if (config.position == PositionKind::rope &&
        std::none_of(t.rope.begin(), t.rope.end(), [&](const ForwardContext::RopeTable& r) { return r.theta == theta; })) {
      const std::int64_t rd = config.rotary_dims();
      // Angles in double on the input's device, then cos/sin rounded once to the compute dtype.
      auto opts = like.options().dtype(at::kDouble);
      at::Tensor inv_freq = at::pow(theta, -at::arange(0, rd, 2, opts) / static_cast<double>(rd));  // [rd/2]
      at::Tensor angles = at::outer(at::arange(L, opts), inv_freq);                                // [L, rd/2]
      t.rope.push_back({theta, angles.cos().to(like.scalar_type()), angles.sin().to(like.scalar_type())});
    }
    if (std::none_of(t.masks.begin(), t.masks.end(), [&](const ForwardContext::MaskTable& m) { return m.window == window; })) {
      at::Tensor i = at::arange(L, like.options().dtype(at::kLong)).unsqueeze(1);  // query
      at::Tensor j = at::arange(L, like.options().dtype(at::kLong)).unsqueeze(0);  // key
      at::Tensor hidden = j > i;
      if (window > 0) hidden = hidden.logical_or(i - j >= window);
      t.masks.push_back(
          {window, at::zeros({L, L}, like.options()).masked_fill_(hidden, -std::numeric_limits<double>::infinity())});
    }
  }
  return t;
}

}  // namespace qeval
