// Block::placed with and without its linear sources (issue 50): an evaluation's kept blocks on a
// GPU must not keep the float32 block they were built from alive beside them, so placing can
// leave weights()' linear entries undefined; the linears hold their own weights, and the norms are
// placed as before.
#include <gtest/gtest.h>

#include <memory>

#include "common/error.h"
#include "loaders/checkpoints/checkpoint.h"
#include "model/block.h"
#include "model/placement.h"
#include "tests/support/test_data.h"

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
