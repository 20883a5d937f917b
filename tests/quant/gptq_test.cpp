// GPTQ codec (quant/formats/gptq.h) against AutoGPTQ 0.7.1's packing and reading (fixtures by
// tests/oracle/make_quantized_checkpoint_fixtures.py), bit for bit; g_idx and bad input.
#include "quant/formats/gptq.h"

#include <gtest/gtest.h>

#include "tests/quant/checkpoint_errors.h"
#include "tests/quant/checkpoint_fixtures.h"

namespace qeval {
namespace {

GptqArgs args_of(const test::CheckpointCase& c) {
  GptqArgs a;
  a.bits = c.meta.at("bits");
  a.group_size = c.meta.at("group_size");
  a.desc_act = c.meta.at("desc_act");
  a.format = c.meta.at("format") == "gptq_v2" ? GptqFormat::v2 : GptqFormat::v1;
  return a;
}

TEST(Gptq, EqualsAutoGptqBitForBit) {
  const auto cases = test::checkpoint_cases("gptq_");
  ASSERT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const GptqWeight w{c.get("qweight"), c.get("qzeros"), c.get("scales"), c.get("g_idx")};
    EXPECT_TRUE(test::bits_equal(gptq_dequantize(w, args_of(c), c.N(), c.K(), c.name), c.get("expected")));
  }
}

// v1's wrap-around: a zero of 0 is stored as −1, which AutoGPTQ's packer ORs in as 0xFFFFFFFF
// (every later field of the word set too); reading masks the field and adds 1, so it reads 2^b.
TEST(Gptq, V1ZeroOfZeroReadsAsAutoGptqReadsIt) {
  const std::int64_t N = 8, K = 32;
  GptqWeight w{at::zeros({4, N}, at::kInt), at::full({1, 1}, -1, at::kInt), at::ones({1, N}, at::kHalf), at::Tensor()};
  GptqArgs a;
  a.bits = 4;
  a.group_size = 32;
  const at::Tensor v1 = gptq_dequantize(w, a, N, K, "w");
  EXPECT_EQ(v1[0][0].item<float>(), -16.0f);  // code 0 − (15 + 1)
  a.format = GptqFormat::v2;
  EXPECT_EQ(gptq_dequantize(w, a, N, K, "w")[0][0].item<float>(), -15.0f);
}

TEST(Gptq, BadInputNamesTheWeightAndField) {
  const std::int64_t N = 8, K = 64;
  GptqArgs a;
  a.bits = 4;
  a.group_size = 32;
  GptqWeight w{at::zeros({8, N}, at::kInt), at::zeros({2, 1}, at::kInt), at::ones({2, N}, at::kHalf), at::Tensor()};
  EXPECT_EQ(test::error_of([&] { gptq_dequantize(w, a, N, K, "l.q"); }), "no error");
  auto with = [&](auto change) {
    GptqWeight x = w;
    GptqArgs y = a;
    change(x, y);
    return test::error_of([&] { gptq_dequantize(x, y, N, K, "l.q"); });
  };
  EXPECT_NE(with([](GptqWeight& x, GptqArgs&) { x.qweight = x.qweight.narrow(0, 0, 7); })
                .find("l.q: qweight has shape [7, 8], expected [8, 8]"), std::string::npos);
  EXPECT_NE(with([](GptqWeight& x, GptqArgs&) { x.qzeros = at::zeros({2, 2}, at::kInt); }).find("l.q: qzeros has shape"),
            std::string::npos);
  EXPECT_NE(with([](GptqWeight& x, GptqArgs&) { x.scales = at::ones({3, 8}, at::kHalf); }).find("l.q: scales has shape"),
            std::string::npos);
  EXPECT_NE(with([](GptqWeight&, GptqArgs& y) { y.bits = 5; }).find("bits 5 is not a GPTQ width"), std::string::npos);
  EXPECT_NE(with([](GptqWeight& x, GptqArgs&) { x.scales = at::full({2, 8}, NAN, at::kHalf); })
                .find("l.q: scales holds a non-finite value"), std::string::npos);
  EXPECT_NE(with([](GptqWeight& x, GptqArgs& y) {
              y.desc_act = true;
              x.g_idx = at::zeros({64}, at::kInt);
              x.g_idx[5] = 2;
            }).find("l.q: g_idx[5] = 2 is outside the 2 groups"), std::string::npos);
  EXPECT_NE(with([](GptqWeight& x, GptqArgs&) { x.g_idx = at::zeros({64}, at::kInt); })
                .find("g_idx[32] = 0 is inconsistent with group_size 32 (expected 1) while desc_act is false"),
            std::string::npos);
}

}  // namespace
}  // namespace qeval
