// Block::placed with and without its linear sources (issue 50): an evaluation's kept blocks on a
// GPU must not keep the float32 block they were built from alive beside them, so placing can
// leave weights()' linear entries undefined; the linears hold their own weights, and the norms are
// placed as before.
#include <gtest/gtest.h>

#include <memory>

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

}  // namespace
}  // namespace qeval
