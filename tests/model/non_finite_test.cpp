// first_non_finite: the one-pass check every weight goes through as it is read (its vectorised
// float32 path) finds exactly what isfinite() finds, at the same index with the same value; and
// checked_max_abs, the same check keeping its maximum, returns exactly max |t|.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <random>

#include "common/error.h"
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

// The maximum a per-tensor quantiser then takes instead of its own pass: exactly at::abs(t).max(),
// over the chunk boundaries, with -0 and zeros, a negative maximum and a maximum in the last
// element; none for a tensor the fast path does not read (another dtype, a view); a non-finite
// value refused naming the tensor and the source.
TEST(NonFinite, CheckedMaxAbsIsExactlyTheMaximumAndRefusesWhatCheckFiniteRefuses) {
  at::manual_seed(7);
  for (const std::vector<std::int64_t>& shape : std::vector<std::vector<std::int64_t>>{
           {1}, {17}, {65536}, {3 * 65536 + 5}, {700, 1031}}) {
    at::Tensor t = at::randn(shape, at::kFloat) * 3.0f;
    const std::int64_t n = t.numel();
    SCOPED_TRACE(n);
    t.view({-1})[n - 1] = -1000.5f;  // the maximum negative, in the last chunk's last element
    const auto got = checked_max_abs(t, "w", "model.bin");
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(*got, at::abs(t).max().item<float>());
    EXPECT_EQ(*got, 1000.5f);
    t.zero_();
    t.view({-1})[0] = -0.0f;
    EXPECT_EQ(checked_max_abs(t, "w", "model.bin"), std::optional<float>(0.0f));
  }
  const at::Tensor w = at::randn({40, 33});
  EXPECT_FALSE(checked_max_abs(w.to(at::kDouble), "w", "model.bin").has_value());
  EXPECT_FALSE(checked_max_abs(w.t(), "w", "model.bin").has_value());
  at::Tensor bad = w.clone();
  bad[39][32] = std::numeric_limits<float>::infinity();
  try {
    (void)checked_max_abs(bad, "layers.0.attn.q.weight", "model.bin");
    FAIL() << "an infinite weight was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.bin: tensor layers.0.attn.q.weight holds a non-finite value: inf at "
                                         "index [39, 32]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace qeval
