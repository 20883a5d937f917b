// bitsandbytes codecs (quant/formats/bitsandbytes.h) against bitsandbytes' own CPU dequantisation
// (fixtures by tests/oracle/make_quantized_checkpoint_fixtures.py), bit for bit; bad input.
#include "quant/formats/bitsandbytes.h"

#include <gtest/gtest.h>

#include "tests/quant/checkpoint_errors.h"
#include "tests/quant/checkpoint_fixtures.h"

namespace qeval {
namespace {

bool w_is_fp4(const test::CheckpointCase& c) { return c.meta.value("quant_type", std::string()) == "fp4"; }

TEST(Bitsandbytes, EqualsBitsandbytesBitForBit) {
  const auto cases = test::checkpoint_cases("bnb_");
  ASSERT_GE(cases.size(), 7u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    at::Tensor got;
    if (c.meta.at("format") == "bitsandbytes-int8") {
      got = bnb_dequantize_int8(c.get("weight"), c.get("SCB"), c.N(), c.K(), c.name);
    } else {
      Bnb4bitWeight w;
      w.weight = c.get("weight");
      w.absmax = c.get("absmax");
      w.blocksize = c.meta.at("blocksize");
      w.quant_type = c.meta.at("quant_type") == "nf4" ? BnbQuantType::nf4 : BnbQuantType::fp4;
      if (c.meta.at("nested").get<bool>()) {
        w.nested_absmax = c.get("nested_absmax");
        w.nested_quant_map = c.get("nested_quant_map");
        w.nested_blocksize = c.meta.at("nested_blocksize");
        w.nested_offset = c.meta.at("nested_offset").get<float>();
      }
      // bitsandbytes reads its own table, not the stored quant_map; they agree
      EXPECT_TRUE(test::bits_equal(at::from_blob(const_cast<float*>(bnb_4bit_table(w.quant_type).data()), {16}, at::kFloat),
                                   c.get("quant_map")));
      got = bnb_dequantize_4bit(w, c.N(), c.K(), c.name);
    }
    // bitsandbytes' CPU kernel decodes fp4 code 8 as +0 through its table where the row length is
    // a multiple of 16 (its AVX-512 path) and as −0 elsewhere (its scalar path); qeval always
    // gives its table's +0. Every other bit is equal.
    EXPECT_TRUE(test::bits_equal(got, c.get("expected"), w_is_fp4(c)));
  }
}

TEST(Bitsandbytes, BadInputNamesTheWeightAndField) {
  Bnb4bitWeight w;
  w.weight = at::zeros({32, 1}, at::kByte);
  w.absmax = at::ones({1}, at::kFloat);
  EXPECT_EQ(test::error_of([&] { bnb_dequantize_4bit(w, 8, 8, "l.up"); }), "no error");
  Bnb4bitWeight x = w;
  x.weight = at::zeros({31, 1}, at::kByte);
  EXPECT_NE(test::error_of([&] { bnb_dequantize_4bit(x, 8, 8, "l.up"); }).find("l.up: weight has shape [31, 1], expected [32, 1]"),
            std::string::npos);
  x = w;
  x.blocksize = 48;
  EXPECT_NE(test::error_of([&] { bnb_dequantize_4bit(x, 8, 8, "l.up"); }).find("blocksize 48"), std::string::npos);
  x = w;
  x.absmax = at::full({1}, NAN);
  EXPECT_NE(test::error_of([&] { bnb_dequantize_4bit(x, 8, 8, "l.up"); }).find("l.up: absmax holds a non-finite value"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { bnb_dequantize_int8(at::zeros({4, 4}, at::kChar), at::ones({3}), 4, 4, "l.o"); })
                .find("l.o: SCB has shape [3], expected [4]"), std::string::npos);
}

}  // namespace
}  // namespace qeval
