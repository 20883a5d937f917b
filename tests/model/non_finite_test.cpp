// first_non_finite: the one-pass check every weight goes through as it is read (its vectorised
// float32 path) finds exactly what isfinite() finds, at the same index with the same value.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <random>

#include "model/weights.h"

namespace qeval {
namespace {

// The definition: the first element, in row-major order, that isfinite() rejects.
std::optional<std::int64_t> reference_flat_index(const at::Tensor& t) {
  const at::Tensor bad = t.isfinite().logical_not().reshape({-1});
  if (!bad.any().item<bool>()) return std::nullopt;
  return bad.nonzero().select(1, 0)[0].item<std::int64_t>();
}

std::int64_t flat_index(const NonFiniteElement& e, const at::Tensor& t) {
  std::int64_t flat = 0;
  for (std::int64_t d = 0; d < t.dim(); ++d) flat = flat * t.size(d) + e.index[static_cast<std::size_t>(d)];
  return flat;
}

TEST(NonFinite, TheFastCheckFindsWhatIsfiniteFinds) {
  std::mt19937_64 rng(66);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()};
  // Lengths around the check's chunk (65,536) and the vector widths, and a 2-D weight.
  const std::vector<std::vector<std::int64_t>> shapes = {{1}, {15}, {17}, {65535}, {65536}, {65537},
                                                         {3 * 65536 + 5}, {700, 1031}};
  int cases = 0;
  for (const auto& shape : shapes) {
    at::Tensor t = at::randn(shape, at::kFloat) * 1e30;  // large but finite values are not flagged
    const std::int64_t n = t.numel();
    SCOPED_TRACE(n);
    EXPECT_FALSE(first_non_finite(t).has_value());
    EXPECT_FALSE(first_non_finite(t.to(at::kDouble)).has_value());
    // One or two bad values at random places, including the first and the last element.
    for (int trial = 0; trial < 12; ++trial) {
      at::Tensor u = t.clone();
      float* p = u.data_ptr<float>();
      const std::int64_t at = trial == 0 ? 0 : trial == 1 ? n - 1 : static_cast<std::int64_t>(rng() % n);
      p[at] = specials[trial % 4];
      if (trial % 3 == 2) p[static_cast<std::int64_t>(rng() % n)] = specials[(trial + 1) % 4];
      const auto found = first_non_finite(u);
      ASSERT_TRUE(found.has_value());
      const auto expected = reference_flat_index(u);
      ASSERT_TRUE(expected.has_value());
      EXPECT_EQ(flat_index(*found, u), *expected);
      const float value = p[*expected];
      if (std::isnan(value))
        EXPECT_TRUE(std::isnan(found->value));
      else
        EXPECT_EQ(found->value, static_cast<double>(value));
      // A non-contiguous view takes the general path and agrees.
      if (u.dim() == 2) EXPECT_EQ(first_non_finite(u.t()).has_value(), reference_flat_index(u.t()).has_value());
      ++cases;
    }
  }
  EXPECT_EQ(cases, 96);
}

}  // namespace
}  // namespace qeval
