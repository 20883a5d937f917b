// AWQ GEMM codec (quant/formats/awq.h) against AutoAWQ 0.2.9's dequantize_gemm (fixtures by
// tests/oracle/make_quantized_checkpoint_fixtures.py), bit for bit; the interleave and bad input.
#include "quant/formats/awq.h"

#include <gtest/gtest.h>

#include "tests/quant/checkpoint_errors.h"
#include "tests/quant/checkpoint_fixtures.h"

namespace qeval {
namespace {

TEST(AwqGemm, EqualsAutoAwqBitForBit) {
  const auto cases = test::checkpoint_cases("awq_");
  ASSERT_GE(cases.size(), 3u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(test::bits_equal(awq_gemm_dequantize(c.get("qweight"), c.get("qzeros"), c.get("scales"), 4,
                                                     c.meta.at("group_size"), c.N(), c.K(), c.name),
                                 c.get("expected")));
  }
}

// Nibble i of a word holds output column kAwqOrder[i].
TEST(AwqGemm, InterleavedOrder) {
  at::Tensor qweight = at::zeros({1, 1}, at::kInt);
  std::uint32_t word = 0;
  for (int i = 0; i < 8; ++i) word |= static_cast<std::uint32_t>(kAwqOrder[i] + 1) << (4 * i);  // column c holds c + 1
  qweight[0][0] = static_cast<std::int32_t>(word);
  const at::Tensor w = awq_gemm_dequantize(qweight, at::zeros({1, 1}, at::kInt), at::ones({1, 8}, at::kHalf), 4, -1, 8, 1, "w");
  for (int n = 0; n < 8; ++n) EXPECT_EQ(w[n][0].item<float>(), n + 1.0f) << n;
}

TEST(AwqGemm, BadInputNamesTheWeightAndField) {
  const at::Tensor qw = at::zeros({64, 2}, at::kInt), qz = at::zeros({2, 2}, at::kInt), s = at::ones({2, 16}, at::kHalf);
  EXPECT_EQ(test::error_of([&] { awq_gemm_dequantize(qw, qz, s, 4, 32, 16, 64, "l.o"); }), "no error");
  EXPECT_NE(test::error_of([&] { awq_gemm_dequantize(qw.narrow(0, 0, 60), qz, s, 4, 32, 16, 64, "l.o"); })
                .find("l.o: qweight has shape [60, 2], expected [64, 2]"), std::string::npos);
  EXPECT_NE(test::error_of([&] { awq_gemm_dequantize(qw, qz, s, 3, 32, 16, 64, "l.o"); }).find("w_bit 3"), std::string::npos);
  EXPECT_NE(test::error_of([&] { awq_gemm_dequantize(qw, qz, s, 4, 48, 16, 64, "l.o"); }).find("q_group_size 48"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { awq_gemm_dequantize(qw, qz, at::full({2, 16}, INFINITY, at::kHalf), 4, 32, 16, 64, "l.o"); })
                .find("l.o: scales holds a non-finite value inf"), std::string::npos);
}

}  // namespace
}  // namespace qeval
