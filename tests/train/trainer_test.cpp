// The trainer on tiny models and a slice of real text (TinyStories with the stories260K
// tokenizer): the loss falls, checkpoints load through the normal loader with identical
// logits, and a resumed run ends with the same parameters, bit for bit, as a straight one.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/qeval_checkpoint.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"
#include "loaders/tokenizers/tokenizer.h"
#include "train/train_data.h"
#include "train/trainer.h"

namespace qeval::train {
namespace {

// The first ~15 kB of TinyStories (whole paragraphs) as a small training file.
std::filesystem::path small_text(const test::TempDir& dir) {
  std::string text = read_file(test::data_path("text/tinystories/validation-head.txt"));
  std::size_t cut = text.find("\n\n", 15000);
  auto path = dir / "stories.txt";
  test::write_bytes(path, text.substr(0, cut));
  return path;
}

TrainOptions tiny(const test::TempDir& dir, bool llama) {
  TrainOptions o;
  o.data = small_text(dir);
  o.tokenizer = test::data_path("models/stories260K/tok512.bin");  // the llama2.c export: SentencePiece cannot load under ASan
  ModelConfig& c = o.model;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = llama ? 2 : 4;
  if (llama) {
    c.norm = NormKind::rmsnorm_single;
    c.position = PositionKind::rope;
    c.attention_softmax = SoftmaxKind::softmax1;
    c.mlp = MlpKind::swiglu;
    c.d_ff = 96;
  } else {
    c.norm = NormKind::layernorm;
    c.position = PositionKind::learned;
    c.mlp = MlpKind::gelu;
    c.d_ff = 128;
    c.attention_bias = c.mlp_bias = true;
    c.tied_embeddings = true;
  }
  o.seq_len = 32;
  o.batch_size = 4;
  o.steps = 12;
  o.warmup = 3;
  o.lr = 3e-3;
  o.val_every = 0;
  o.val_windows = 16;
  o.log_every = 4;
  o.progress = false;
  o.optimizer.kind = llama ? "orthoadam" : "adam";
  o.optimizer.transform_seed = 17;
  o.seed = 5;
  return o;
}

std::map<std::string, at::Tensor> named(const TrainResult& r) { return qeval_named_tensors(r.config, r.weights); }

TEST(Trainer, LossFallsOnATinyRun) {
  test::TempDir dir;
  TrainOptions o = tiny(dir, false);
  o.steps = 60;
  o.warmup = 5;
  o.val_every = 30;
  TrainResult r = run_training(o);
  ASSERT_EQ(r.step, 60);
  const auto& h = r.history;
  ASSERT_GE(h.size(), 3u);
  const double first = h.front().at("train_loss").get<double>();
  const double last = h.back().at("train_loss").get<double>();
  // Untrained: about ln(512) = 6.24 nats. After 60 steps clearly below.
  EXPECT_NEAR(first, std::log(512.0), 0.5);
  EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
  EXPECT_LT(r.val_loss, first - 1.0);
}

TEST(Trainer, LearningRateWarmsUpThenFollowsTheCosine) {
  TrainOptions o;
  o.lr = 1e-3;
  o.min_lr_ratio = 0.1;
  o.warmup = 10;
  o.steps = 110;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(o, 9), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10), 1e-3);
  EXPECT_NEAR(learning_rate(o, 60), 0.55e-3, 1e-12);  // halfway: (lr + min) / 2
  EXPECT_NEAR(learning_rate(o, 110), 1e-4, 1e-12);
}

TEST(Trainer, CheckpointLoadsWithIdenticalLogits) {
  for (bool llama : {false, true}) {
    SCOPED_TRACE(llama ? "llama / orthoadam" : "gpt2 / adam");
    test::TempDir dir;
    TrainOptions o = tiny(dir, llama);
    o.out = dir / "ck";
    TrainResult r = run_training(o);
    LoadedCheckpoint ck = load_checkpoint(o.out);
    EXPECT_EQ(ck.format, "qeval");
    ASSERT_TRUE(ck.config.optimizer.has_value());
    EXPECT_EQ(*ck.config.optimizer, o.optimizer.kind);
    EXPECT_EQ(ck.config.attention_softmax, o.model.attention_softmax);
    EXPECT_EQ(ck.config.norm, o.model.norm);
    EXPECT_EQ(ck.notes.at("metadata").at("step").get<std::int64_t>(), 12);
    EXPECT_TRUE(std::filesystem::exists(o.out / "tok512.bin"));  // eval finds the tokenizer beside it
    at::Tensor tokens = at::randint(0, 512, {2, 32}, at::kLong);
    at::Tensor expected = Transformer(r.config, r.weights).forward(tokens);
    at::Tensor got = Transformer(ck.config, ck.weights).forward(tokens);
    EXPECT_TRUE(test::tensors_equal(got, expected));
  }
}

TEST(Trainer, ResumeGivesBitIdenticalParameters) {
  for (bool llama : {true, false}) {
    SCOPED_TRACE(llama ? "llama / orthoadam" : "gpt2 / adam");
    test::TempDir dir;
    TrainOptions straight = tiny(dir, llama);
    TrainResult a = run_training(straight);

    TrainOptions first = tiny(dir, llama);
    first.out = dir / "half";
    first.stop_after = 5;
    TrainResult half = run_training(first);
    ASSERT_EQ(half.step, 5);
    EXPECT_TRUE(half.stopped_early);

    TrainOptions second = tiny(dir, llama);
    second.resume = dir / "half";
    second.out = dir / "resumed";
    TrainResult b = run_training(second);
    ASSERT_EQ(b.step, 12);
    auto ta = named(a), tb = named(b);
    ASSERT_EQ(ta.size(), tb.size());
    for (const auto& [name, t] : ta) EXPECT_TRUE(test::tensors_equal(tb.at(name), t)) << name;
    // And training changed them at all.
    auto th = named(half);
    EXPECT_FALSE(at::equal(th.begin()->second, ta.begin()->second));

    TrainOptions other = tiny(dir, llama);
    other.resume = dir / "half";
    other.batch_size = 8;  // a different recipe must not silently continue
    EXPECT_THROW(run_training(other), Error);
    TrainOptions moved = tiny(dir, llama);
    moved.resume = dir / "half";
    moved.data = dir / "other.txt";  // another token stream: the data position would be meaningless
    test::write_bytes(moved.data, read_file(straight.data).substr(100));
    EXPECT_THROW(run_training(moved), Error);
  }
}

// --bos-per-window: every window (training and validation) is BOS followed by the next
// seq_len - 1 tokens of the same stream the plain windows are cut from, and a run that trained
// without it cannot be resumed with it.
TEST(Trainer, BosPerWindowOpensEveryWindowWithBos) {
  test::TempDir dir;
  TrainOptions o = tiny(dir, false);
  auto tokenizer = load_tokenizer(o.tokenizer);
  ASSERT_TRUE(tokenizer->bos_id().has_value());
  const std::int64_t bos = *tokenizer->bos_id();
  TrainWindows plain = load_train_windows(o.data, *tokenizer, o.seq_len, 0.1);
  TrainWindows opened = load_train_windows(o.data, *tokenizer, o.seq_len, 0.1, {}, true);
  at::Tensor stream = at::cat({plain.train, plain.val}).reshape({-1});
  at::Tensor windows = at::cat({opened.train, opened.val});
  ASSERT_GT(windows.size(0), 4);
  EXPECT_TRUE(at::all(windows.select(1, 0) == bos).item<bool>());
  at::Tensor rest = windows.narrow(1, 1, o.seq_len - 1).reshape({-1});
  // Both drop a partial last window, at different places (windows of 31 vs 32 stream tokens).
  const std::int64_t common = std::min(rest.numel(), stream.numel());
  ASSERT_GT(common, 4 * o.seq_len);
  EXPECT_TRUE(at::equal(rest.narrow(0, 0, common), stream.narrow(0, 0, common)));
  // The plain stream's windows do not all open with BOS, or this test would show nothing.
  EXPECT_FALSE(at::all(plain.train.select(1, 0) == bos).item<bool>());

  o.out = dir / "half";
  o.stop_after = 3;
  run_training(o);
  TrainOptions resumed = tiny(dir, false);
  resumed.resume = dir / "half";
  resumed.bos_per_window = true;
  EXPECT_THROW(run_training(resumed), Error);
}

}  // namespace
}  // namespace qeval::train
