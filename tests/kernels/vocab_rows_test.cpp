// The vocabulary row reductions (kernels/cpu/vocab_rows_cpu.h): every variant this CPU runs gives
// the scalar reference's bits on random rows of every length around the vector widths (ties,
// −inf and very negative logits included), and the exponential is e^x to about an ulp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <ATen/ATen.h>

#include "kernels/cpu/vocab_rows_cpu.h"

namespace qeval::kernels::cpu {
namespace {

std::vector<CpuIsa> variants_this_cpu_runs() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512})
    if (cpu_runs(isa)) out.push_back(isa);
  return out;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// A row of logits with what real rows have: a spread of values, ties at the maximum, −inf and
// entries far below the maximum (their exponentials underflow to 0).
std::vector<float> logits_row(std::int64_t n, int seed) {
  at::manual_seed(seed);
  const at::Tensor t = 6 * at::randn({n});
  std::vector<float> row(t.data_ptr<float>(), t.data_ptr<float>() + n);
  if (n > 3) {
    row[0] = -std::numeric_limits<float>::infinity();
    row[1] = -200.0f;
    row[static_cast<std::size_t>(n / 2)] = 40.0f;  // the maximum, twice: the first must be reported
    row[static_cast<std::size_t>(n - 1)] = 40.0f;
  }
  return row;
}

TEST(VocabRows, EveryVariantGivesTheReferenceBits) {
  const auto variants = variants_this_cpu_runs();
  if (variants.empty()) GTEST_SKIP() << "this CPU runs neither the AVX2 nor the AVX-512 variant";
  const VocabRowKernels ref = vocab_row_reference();
  for (CpuIsa isa : variants) {
    const VocabRowKernels k = vocab_row_kernels(isa);
    for (std::int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 23, 24, 31, 33, 100, 1105, 8192, 8192 + 37}) {
      const auto x = logits_row(n, static_cast<int>(n));
      const auto f = logits_row(n, static_cast<int>(n) + 1000);  // "full precision's" row
      SCOPED_TRACE(std::string(cpu_isa_name(isa)) + ", n " + std::to_string(n));
      std::int64_t first_ref = -1, first = -1;
      const float max_ref = ref.max_first(x.data(), n, &first_ref);
      EXPECT_EQ(k.max_first(x.data(), n, &first), max_ref);
      EXPECT_EQ(first, first_ref);
      if (n > 3) EXPECT_EQ(first_ref, n / 2);  // the first of the two maxima

      std::vector<float> e_ref(static_cast<std::size_t>(n)), e(static_cast<std::size_t>(n), -1.0f);
      const double sum_ref = ref.exp_sum(x.data(), n, max_ref, e_ref.data());
      EXPECT_TRUE(same_bits(k.exp_sum(x.data(), n, max_ref, e.data()), sum_ref));
      EXPECT_TRUE(same_bits(k.exp_sum(x.data(), n, max_ref, nullptr), sum_ref));
      EXPECT_EQ(std::memcmp(e.data(), e_ref.data(), e.size() * sizeof(float)), 0);

      const double kl_ref = ref.weighted_difference_sum(f.data(), e_ref.data(), x.data(), n);
      EXPECT_TRUE(same_bits(k.weighted_difference_sum(f.data(), e_ref.data(), x.data(), n), kl_ref));
      // The reference's order is the one documented: eight float64 lanes, then the lanes.
      double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (std::int64_t v = 0; v < n; ++v) lanes[v & 7] += static_cast<double>(e_ref[static_cast<std::size_t>(v)]);
      double sum = 0;
      for (double l : lanes) sum += l;
      EXPECT_TRUE(same_bits(sum, sum_ref));
    }
  }
}

TEST(VocabRows, ExpIsWithinTwoUlpsOfTheCorrectlyRoundedExp) {
  int worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.00731f) {
    const float got = exp_lane(x);
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    std::int32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want, 4);
    worst = std::max(worst, std::abs(a - b));
  }
  EXPECT_LE(worst, 2);
  EXPECT_EQ(exp_lane(0.0f), 1.0f);
  EXPECT_EQ(exp_lane(-100.0f), 0.0f);
  EXPECT_EQ(exp_lane(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(exp_lane(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VocabRows, AVariantThisCpuDoesNotRunIsRefused) {
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512})
    if (!cpu_runs(isa)) EXPECT_THROW(vocab_row_kernels(isa), c10::Error) << cpu_isa_name(isa);
  // none is the scalar reference itself.
  const VocabRowKernels none = vocab_row_kernels(CpuIsa::none), ref = vocab_row_reference();
  EXPECT_EQ(none.max_first, ref.max_first);
  EXPECT_EQ(none.exp_sum, ref.exp_sum);
  EXPECT_EQ(none.weighted_difference_sum, ref.weighted_difference_sum);
}

}  // namespace
}  // namespace qeval::kernels::cpu
