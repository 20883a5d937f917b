// compressed-tensors 0.20 codecs (quant/formats/compressed_tensors.h) against the library's own
// decompressors (fixtures by tests/oracle/make_quantized_checkpoint_fixtures.py), bit for bit, and
// hand-made streams and bad input.
#include "quant/formats/compressed_tensors.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/quant/checkpoint_fixtures.h"

namespace qeval {
namespace {

ScaleLayout layout_of(const test::CheckpointCase& c) {
  ScaleLayout l;
  const std::string s = c.meta.value("strategy", std::string("group"));
  if (s == "tensor") l.kind = ScaleLayout::Kind::tensor;
  if (s == "channel") l.kind = ScaleLayout::Kind::channel;
  if (s == "group") l.kind = ScaleLayout::Kind::group, l.group = c.meta.at("group_size").get<std::int64_t>();
  if (s == "block") {
    l.kind = ScaleLayout::Kind::block;
    l.block_rows = c.meta.at("block_structure")[0].get<std::int64_t>();
    l.block_cols = c.meta.at("block_structure")[1].get<std::int64_t>();
  }
  return l;
}

at::Tensor dequantize(const test::CheckpointCase& c) {
  const std::string format = c.meta.at("format");
  const int bits = c.meta.at("bits");
  if (format == "pack-quantized")
    return ct_dequantize_pack_quantized({c.get("weight_packed"), c.get("weight_scale"), c.get("weight_zero_point")}, bits,
                                        layout_of(c), c.N(), c.K(), c.name);
  if (format == "int-quantized")
    return ct_dequantize_int_quantized(c.get("weight"), c.get("weight_scale"), c.get("weight_zero_point"), bits, layout_of(c),
                                       c.N(), c.K(), c.name);
  if (format == "float-quantized") return ct_dequantize_float_quantized(c.get("weight"), c.get("weight_scale"), layout_of(c), c.N(), c.K(), c.name);
  return ct_dequantize_nvfp4(c.get("weight_packed"), c.get("weight_scale"), c.get("weight_global_scale"), c.N(), c.K(), c.name);
}

TEST(CompressedTensors, EqualsTheLibrarysDecompressionBitForBit) {
  const auto cases = test::checkpoint_cases("ct_");
  ASSERT_GE(cases.size(), 17u);
  std::int64_t values = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.meta.at("library"), "compressed-tensors 0.20.0");
    EXPECT_TRUE(test::bits_equal(dequantize(c), c.get("expected")));
    values += c.get("expected").numel();
  }
  RecordProperty("values", static_cast<int>(values));
}

// A hand-made 3-bit row: fields cross word boundaries (field 10 = bits 30..32).
TEST(CompressedTensors, OddWidthFieldsCrossWords) {
  std::vector<std::int32_t> codes(32);
  for (int i = 0; i < 32; ++i) codes[i] = (i * 5) % 8 - 4;
  std::vector<std::uint32_t> words(3, 0);
  for (int i = 0; i < 32; ++i) {
    const std::uint64_t f = static_cast<std::uint32_t>(codes[i] + 4);
    const int bit = 3 * i;
    words[bit / 32] |= static_cast<std::uint32_t>(f << (bit % 32));
    if (bit % 32 + 3 > 32) words[bit / 32 + 1] |= static_cast<std::uint32_t>(f >> (32 - bit % 32));
  }
  at::Tensor packed = at::empty({1, 3}, at::kInt);
  std::memcpy(packed.data_ptr<std::int32_t>(), words.data(), 12);
  const at::Tensor got = ct_unpack_int32(packed, 3, 1, 32, 1, "w", "weight_packed");
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[0][i].item<std::int32_t>(), codes[i]) << i;
}

TEST(CompressedTensors, BadInputNamesTheWeightAndField) {
  ScaleLayout g;
  g.kind = ScaleLayout::Kind::group;
  g.group = 32;
  const at::Tensor packed = at::zeros({4, 8}, at::kInt), scale = at::ones({4, 2}, at::kHalf);
  EXPECT_NO_THROW(ct_dequantize_pack_quantized({packed, scale, at::Tensor()}, 4, g, 4, 64, "layers.0.q"));
  auto message = [&](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { ct_dequantize_pack_quantized({packed.narrow(1, 0, 7), scale, at::Tensor()}, 4, g, 4, 64, "layers.0.q"); })
                .find("layers.0.q: weight_packed has shape [4, 7], expected [4, 8]"),
            std::string::npos);
  EXPECT_NE(message([&] { ct_dequantize_pack_quantized({packed, scale, at::Tensor()}, 9, g, 4, 64, "layers.0.q"); })
                .find("num_bits 9"),
            std::string::npos);
  at::Tensor bad = scale.clone();
  bad[1][1] = std::numeric_limits<float>::infinity();
  EXPECT_NE(message([&] { ct_dequantize_pack_quantized({packed, bad, at::Tensor()}, 4, g, 4, 64, "layers.0.q"); })
                .find("layers.0.q: weight_scale holds a non-finite value inf"),
            std::string::npos);
  g.group = 48;
  EXPECT_NE(message([&] { ct_dequantize_pack_quantized({packed, scale, at::Tensor()}, 4, g, 4, 64, "layers.0.q"); })
                .find("group size 48 does not divide"),
            std::string::npos);
  const at::Tensor nan_scale = at::full({4, 4}, 0x7f, at::kByte);
  EXPECT_NE(message([&] { ct_dequantize_nvfp4(at::zeros({4, 32}, at::kByte), nan_scale, at::ones({1}), 4, 64, "x"); })
                .find("x: weight_scale holds the E4M3 NaN code 0x7f"),
            std::string::npos);
  EXPECT_NE(message([&] { ct_dequantize_nvfp4(at::zeros({4, 32}, at::kByte), at::zeros({4, 4}, at::kByte), at::zeros({1}), 4, 64, "x"); })
                .find("non-finite"),
            std::string::npos);
}

}  // namespace
}  // namespace qeval
