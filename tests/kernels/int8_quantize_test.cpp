// The fused activation quantiser (both variants) against the reference maths of quant/quantize.h:
// codes and scales bit for bit, including values that land exactly on .5 after division.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/int8_quantize_cpu.h"
#include "kernels/int8_quantize.h"
#include "quant/quantize.h"
#include "tests/support/test_data.h"

namespace qeval::kernels {
namespace {

// Reference: scales over groups of `rows` consecutive rows through quant/quantize.h.
Int8Rows reference(const at::Tensor& x, std::int64_t rows) {
  const std::int64_t M = x.size(0);
  std::vector<at::Tensor> qs, ss;
  for (std::int64_t r0 = 0; r0 < M; r0 += rows) {
    at::Tensor part = x.narrow(0, r0, std::min(rows, M - r0));
    at::Tensor s = int8_absmax_scale(part, {0, 1});  // [1, 1]
    qs.push_back(int8_quantize(part, s));
    ss.push_back(s.reshape({1}));
  }
  return {at::cat(qs, 0), at::cat(ss, 0)};
}

// The rows quantised by one variant: "dispatch" (this CPU's best), "portable" or "avx2".
Int8Rows quantize_with(const std::string& variant, const at::Tensor& x, std::int64_t rows) {
  if (variant == "portable") return cpu::quantize_int8_rows_portable(x, rows);
  if (variant == "avx2") return cpu::quantize_int8_rows_avx2(x, rows);
  return quantize_int8_rows(x, rows);
}

TEST(Int8QuantizeRows, EqualsTheReferenceBitForBit) {
  at::manual_seed(21);
  for (std::int64_t K : {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 768}) {
    at::Tensor x = at::randn({10, K}) * 3;
    x[3].zero_();                   // an all-zero row (its own group when per token)
    x[7] *= 1000;                   // a loud row
    for (std::int64_t rows : {1, 3, 10, 11}) {
      Int8Rows want = reference(x, rows);
      for (const char* variant : {"dispatch", "portable", "avx2"}) {
        const std::string v = variant;
        if (v == "avx2" && !cpu::int8_quantize_avx2_available()) continue;
        Int8Rows got = quantize_with(v, x, rows);
        EXPECT_TRUE(test::tensors_equal(got.scales, want.scales)) << "K " << K << " rows " << rows << " " << v;
        EXPECT_TRUE(test::tensors_equal(got.q, want.q)) << "K " << K << " rows " << rows << " " << v;
      }
    }
  }
}

// A NaN gives its row (its group) a NaN scale in every variant, an infinity an infinite one: the
// weight quantiser reads finiteness from the scales instead of a pass of its own.
TEST(Int8QuantizeRows, NonFiniteValuesGiveNonFiniteScales) {
  for (std::int64_t K : {3, 8, 13, 16, 29, 64, 100}) {
    for (std::int64_t at_k : {std::int64_t{0}, K / 2, K - 1}) {
      for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        at::Tensor x = at::randn({4, K});
        x[2][at_k] = bad;
        for (std::int64_t rows : {1, 2}) {
          for (const char* variant : {"dispatch", "portable", "avx2"}) {
            const std::string v = variant;
            if (v == "avx2" && !cpu::int8_quantize_avx2_available()) continue;
            Int8Rows got = quantize_with(v, x, rows);
            const float s = got.scales[2 / rows].item<float>();
            if (std::isnan(bad))
              EXPECT_TRUE(std::isnan(s)) << "K " << K << " at " << at_k << " rows " << rows << " " << v << ": " << s;
            else
              EXPECT_TRUE(std::isinf(s)) << "K " << K << " at " << at_k << " rows " << rows << " " << v << ": " << s;
            EXPECT_TRUE(std::isfinite(got.scales[0].item<float>())) << v;  // the other rows keep theirs
          }
          EXPECT_EQ(std::isnan(cpu::row_absmax(x[2].data_ptr<float>(), K)), std::isnan(bad));
        }
      }
    }
  }
}

TEST(Int8QuantizeRows, HalfwayValuesRoundToEven) {
  // max |x| = 63.5 → s = 0.5, so every x / s below is exact and most sit on a .5:
  // 0.5 → 0, 1.5 → 2, 2.5 → 2, −2.5 → −2, 6.5 → 6, 7.5 → 8, ..., 23.5 → 24; ±63.5 → ±127.
  at::Tensor x = at::tensor({0.25f, 0.75f, 1.25f, -1.25f, 63.5f, 0.0f, -0.25f, 3.25f, 3.75f, -63.5f, 5.25f, 6.25f,
                             7.25f, 8.25f, 9.75f, 10.25f, 11.75f},
                            at::kFloat)
                     .reshape({1, 17});
  Int8Rows got = quantize_int8_rows(x, 1);
  std::vector<int> want = {0, 2, 2, -2, 127, 0, 0, 6, 8, -127, 10, 12, 14, 16, 20, 20, 24};
  at::Tensor expected = at::tensor(want, at::kInt).to(at::kChar).reshape({1, 17});
  EXPECT_TRUE(test::tensors_equal(got.q, expected));
  EXPECT_EQ(got.scales.item<float>(), 0.5f);
  EXPECT_TRUE(test::tensors_equal(cpu::quantize_int8_rows_portable(x, 1).q, expected));
  if (cpu::int8_quantize_avx2_available()) {
    // 17 values: the AVX2 variant takes none in its 32-wide loop; repeat them to fill two steps.
    at::Tensor x2 = x.repeat({1, 4});                    // [1, 68]
    at::Tensor e2 = expected.repeat({1, 4});
    EXPECT_TRUE(test::tensors_equal(cpu::quantize_int8_rows_avx2(x2, 1).q, e2));
  }
}

// The in-place round trip (a scheme's output quantisation) against quant/quantize.h's
// int8_dequantize of the reference codes, compared as bits: a small negative value whose code is
// 0 must come back +0 (float(0) · s), not −0 (which at::equal would not tell apart).
TEST(Int8QuantizeRows, RoundTripInPlaceEqualsDequantisedReferenceBits) {
  at::manual_seed(22);
  for (std::int64_t K : {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 768}) {
    at::Tensor x = at::randn({10, K}) * 3;
    x[3].zero_();
    x[7] *= 1000;  // a loud row: the others' small values round to code 0, negative ones included
    x[5] = -at::rand({K}) * 1e-3;
    x[5][0] = 10.0f;
    for (std::int64_t rows : {1, 3, 10, 11}) {
      Int8Rows codes = reference(x, rows);
      const at::Tensor per_row = scales_per_row(codes, rows).unsqueeze(1);
      const at::Tensor want = int8_dequantize(codes.q, per_row);
      for (const char* variant : {"dispatch", "portable", "avx2"}) {
        const std::string v = variant;
        if (v == "avx2" && !cpu::int8_quantize_avx2_available()) continue;
        at::Tensor got = x.clone();
        if (v == "portable")
          cpu::fake_quantize_int8_rows_portable_(got, rows);
        else if (v == "avx2")
          cpu::fake_quantize_int8_rows_avx2_(got, rows);
        else
          fake_quantize_int8_rows_(got, rows);
        EXPECT_TRUE(test::tensors_equal(got.view(at::kInt), want.view(at::kInt)))
            << "K " << K << " rows " << rows << " " << v;
      }
    }
  }
  at::Tensor strided = at::randn({4, 6}).t();
  EXPECT_THROW(fake_quantize_int8_rows_(strided, 1), c10::Error);
}

TEST(Int8QuantizeRows, ScalesPerRowRepeatEachGroupScale) {
  at::Tensor x = at::randn({5, 4});
  Int8Rows r = quantize_int8_rows(x, 2);
  ASSERT_EQ(r.scales.size(0), 3);
  at::Tensor per_row = scales_per_row(r, 2);
  ASSERT_EQ(per_row.size(0), 5);
  EXPECT_EQ(per_row[1].item<float>(), r.scales[0].item<float>());
  EXPECT_EQ(per_row[4].item<float>(), r.scales[2].item<float>());
  EXPECT_THROW(quantize_int8_rows(x, 0), c10::Error);
  EXPECT_THROW(quantize_int8_rows(x.to(at::kDouble), 1), c10::Error);
}

}  // namespace
}  // namespace qeval::kernels
