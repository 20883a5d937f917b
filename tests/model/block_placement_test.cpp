// Block::placed with and without its linear sources (issue 50): an evaluation's kept blocks on a
// GPU must not keep the float32 block they were built from alive beside them, so placing can
// leave weights()' linear entries undefined; the linears hold their own weights, and the norms are
// placed as before. A block built with the read's maxima gives each FloatLinear its own weight's
// max |w|, which a per-tensor int8 rewrite then uses with the same bits.
#include <gtest/gtest.h>

#include <memory>

#include "common/error.h"
#include "loaders/checkpoints/checkpoint.h"
#include "model/block.h"
#include "model/placement.h"
#include "model/weights.h"
#include "quant/quantized_linear.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/spec.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

TEST(BlockPlacement, WithoutLinearSourcesOnlyTheLinearsHoldTheirWeights) {
  const LoadedCheckpoint ck = load_checkpoint(test::data_path("models/stories260K/stories260K.bin"));
  const auto config = std::make_shared<const ModelConfig>(ck.config);
  const Block block(config, 1, ck.weights.blocks[1]);
  PlacementCache keep_cache(Placement{}), drop_cache(Placement{});
  const Block kept = block.placed(keep_cache);
  const Block dropped = block.placed(drop_cache, /*keep_linear_sources=*/false);

  const BlockWeights& source = ck.weights.blocks[1];
  EXPECT_TRUE(kept.weights().q.weight.is_same(source.q.weight));
  EXPECT_TRUE(kept.weights().down.weight.is_same(source.down.weight));
  for (const at::Tensor* t : {&dropped.weights().q.weight, &dropped.weights().k.weight, &dropped.weights().v.weight,
                              &dropped.weights().o.weight, &dropped.weights().up.weight, &dropped.weights().gate.weight,
                              &dropped.weights().down.weight})
    EXPECT_FALSE(t->defined()) << "a linear's source weight is still held";
  // The norms are the block's own, placed; the linears compute with the same weights.
  ASSERT_TRUE(dropped.weights().attn_norm.weight.defined());
  EXPECT_TRUE(dropped.weights().attn_norm.weight.equal(source.attn_norm.weight));
  ASSERT_EQ(dropped.linears().size(), block.linears().size());
  at::manual_seed(3);
  for (std::size_t i = 0; i < block.linears().size(); ++i) {
    SCOPED_TRACE(block.linears()[i].name);
    const at::Tensor in = at::randn({1, 5, block.linears()[i].linear->in_features()});
    EXPECT_TRUE(dropped.linears()[i].linear->forward(in).equal(block.linears()[i].linear->forward(in)));
  }
}

// The maxima reach the right linears (named_tensors' names against the block's linear names, fused
// projections included), a per-tensor int8 rewrite with them equals one without them bit for bit,
// and a placed copy drops them (another dtype would round the weight).
TEST(BlockPlacement, EachLinearCarriesItsOwnWeightsMaximumFromTheRead) {
  const LoadedCheckpoint ck = load_checkpoint(test::data_path("models/stories260K/stories260K.bin"));
  const Transformer gpt2_style = test::random_transformer(5, /*gpt2=*/true);
  const std::vector<std::pair<ModelConfig, BlockWeights>> cases = {{ck.config, ck.weights.blocks[1]},
                                                                   {gpt2_style.config(), gpt2_style.weights().blocks[1]}};
  for (const auto& [model_config, weights] : cases) {
    SCOPED_TRACE(model_config.fused_qkv ? "fused qkv" : "stories260K");
    const auto config = std::make_shared<const ModelConfig>(model_config);
    const Block with(config, 1, weights, "model", checked_block_max_abs(weights, 1, "model"));
    const Block without(config, 1, weights);
    ASSERT_EQ(with.linears().size(), without.linears().size());
    for (const NamedLinear& named : with.linears()) {
      SCOPED_TRACE(named.name);
      const auto& fl = dynamic_cast<const FloatLinear&>(*named.linear);
      ASSERT_TRUE(fl.weight_max_abs().has_value());
      EXPECT_EQ(*fl.weight_max_abs(), at::abs(fl.weight()).max().item<float>());
      PlacementCache cache(Placement{});
      EXPECT_FALSE(dynamic_cast<const FloatLinear&>(*fl.placed(cache)).weight_max_abs().has_value());
    }
    for (const std::string preset : {"int8-coarse", "int8-moderate", "fp8-e4m3-tensor", "nvfp4"}) {
      SCOPED_TRACE(preset);
      SchemeRewrite a(preset_scheme(preset), model_linear_names(model_config));
      SchemeRewrite b(preset_scheme(preset), model_linear_names(model_config));
      const Block qa = a.rewrite(with), qb = b.rewrite(without);
      for (std::size_t i = 0; i < qa.linears().size(); ++i) {
        SCOPED_TRACE(qa.linears()[i].name);
        const auto& la = dynamic_cast<const QuantizedLinear&>(*qa.linears()[i].linear);
        const auto& lb = dynamic_cast<const QuantizedLinear&>(*qb.linears()[i].linear);
        ASSERT_EQ(la.int8_weight().has_value(), preset.rfind("int8", 0) == 0);
        if (la.int8_weight()) {
          EXPECT_TRUE(test::tensors_equal(la.int8_weight()->q, lb.int8_weight()->q));
          EXPECT_TRUE(test::tensors_equal(la.int8_weight()->scales, lb.int8_weight()->scales));
        }
        EXPECT_TRUE(test::tensors_equal(la.dequantized_weight(), lb.dequantized_weight()));
      }
    }
  }
}

// --dtype: fp64 is the CPU's reference arithmetic (rounding bands); half precision is the GPU's.
// Each refusal names the option, the dtype and the way out.
TEST(Placement, DtypesEachDeviceTakes) {
  const at::Device cpu(at::kCPU), gpu(at::kCUDA, 0);
  EXPECT_EQ(parse_dtype("auto", cpu), at::kFloat);
  EXPECT_EQ(parse_dtype("fp64", cpu), at::kDouble);
  EXPECT_EQ(parse_dtype("auto", gpu), at::kHalf);
  EXPECT_EQ(parse_dtype("bf16", gpu), at::kBFloat16);
  EXPECT_EQ(dtype_name(at::kDouble), "fp64");
  auto refusal = [](const std::string& dtype, const at::Device& device) {
    try {
      parse_dtype(dtype, device);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string fp64_on_gpu = refusal("fp64", gpu);
  EXPECT_NE(fp64_on_gpu.find("--dtype fp64 on cuda:0"), std::string::npos) << fp64_on_gpu;
  EXPECT_NE(fp64_on_gpu.find("--device cpu"), std::string::npos) << fp64_on_gpu;
  const std::string fp16_on_cpu = refusal("fp16", cpu);
  EXPECT_NE(fp16_on_cpu.find("--dtype fp16 on the CPU"), std::string::npos) << fp16_on_cpu;
  EXPECT_NE(refusal("fp8", cpu).find("expected fp32, fp16, bf16, fp64 or auto"), std::string::npos);
}

}  // namespace
}  // namespace qeval
