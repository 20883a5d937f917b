// Fine-grained FP8 (quant/formats/fp8_block.h) against its definition computed by torch's own FP8
// casts (fixtures by tests/oracle/make_quantized_checkpoint_fixtures.py), bit for bit; bad input.
#include "quant/formats/fp8_block.h"

#include <gtest/gtest.h>

#include "tests/quant/checkpoint_errors.h"
#include "tests/quant/checkpoint_fixtures.h"

namespace qeval {
namespace {

TEST(Fp8Block, EqualsTheDefinitionBitForBit) {
  const auto cases = test::checkpoint_cases("fp8_block_");
  ASSERT_GE(cases.size(), 2u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto& b = c.meta.at("weight_block_size");
    EXPECT_TRUE(test::bits_equal(
        fp8_block_dequantize(c.get("weight"), c.get("weight_scale_inv"), b[0], b[1], c.N(), c.K(), c.name), c.get("expected")));
  }
}

TEST(Fp8Block, EdgeBlocksAndBadInput) {
  // 130 × 129 with 128 × 128 blocks: 2 × 2 scales, the edge blocks one row / column wide
  at::Tensor w = at::full({130, 129}, 0x38, at::kByte);  // E4M3 0x38 = 1.0
  at::Tensor s = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({2, 2});
  const at::Tensor out = fp8_block_dequantize(w, s, 128, 128, 130, 129, "w");
  EXPECT_EQ(out[127][127].item<float>(), 1.0f);
  EXPECT_EQ(out[127][128].item<float>(), 2.0f);
  EXPECT_EQ(out[129][0].item<float>(), 3.0f);
  EXPECT_EQ(out[129][128].item<float>(), 4.0f);
  EXPECT_NE(test::error_of([&] { fp8_block_dequantize(w, s.narrow(0, 0, 1), 128, 128, 130, 129, "l.q"); })
                .find("l.q: weight_scale_inv has shape [1, 2], expected [2, 2]"), std::string::npos);
  EXPECT_NE(test::error_of([&] { fp8_block_dequantize(w.narrow(0, 0, 129), s, 128, 128, 130, 129, "l.q"); })
                .find("l.q: weight has shape [129, 129], expected [130, 129]"), std::string::npos);
  s[1][0] = INFINITY;
  EXPECT_NE(test::error_of([&] { fp8_block_dequantize(w, s, 128, 128, 130, 129, "l.q"); })
                .find("l.q: weight_scale_inv holds a non-finite value inf"), std::string::npos);
}

}  // namespace
}  // namespace qeval
