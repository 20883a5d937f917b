// The trainer on tiny models and a slice of real text (TinyStories with the stories260K
// tokenizer): the loss falls, checkpoints load through the normal loader with identical
// logits, and a resumed run ends with the same parameters, bit for bit, as a straight one.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

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

TEST(KeepSchedule, EveryNAndLogSpacedLikePythia) {
  auto kept = [](const KeepSchedule& s, std::int64_t up_to) {
    std::vector<std::int64_t> out;
    for (std::int64_t step = 1; step <= up_to; ++step)
      if (s.keeps(step)) out.push_back(step);
    return out;
  };
  EXPECT_FALSE(KeepSchedule::parse("").enabled());
  EXPECT_EQ(kept(KeepSchedule::parse("5"), 17), (std::vector<std::int64_t>{5, 10, 15}));
  EXPECT_EQ(kept(KeepSchedule::parse("log:50"), 160), (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 50, 100, 150}));
  EXPECT_EQ(kept(KeepSchedule::parse("log:64"), 130), (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64, 128}));
  EXPECT_EQ(KeepSchedule::parse("log:50").to_string(), "log:50");
  for (const char* bad : {"0", "log:", "log:0", "-3", "every 5", "5x", "log:5:6"}) {
    SCOPED_TRACE(bad);
    try {
      KeepSchedule::parse(bad);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--keep-checkpoints"), std::string::npos) << e.what();
    }
  }
}

// --keep-checkpoints: step-N/ folders on the schedule and at the last step, each a normal
// checkpoint with its place in the run in its metadata; the last one is the run's own model.
TEST(Trainer, KeepCheckpointsWritesALoadableSeries) {
  test::TempDir dir;
  TrainOptions o = tiny(dir, false);
  o.out = dir / "run";
  o.keep = KeepSchedule::parse("log:4");  // 1, 2, 4, 8 and the last step, 12
  TrainResult r = run_training(o);
  const std::vector<std::int64_t> steps = {1, 2, 4, 8, 12};
  for (std::int64_t step : steps) {
    SCOPED_TRACE(step);
    const auto folder = o.out / kept_folder_name(step);
    LoadedCheckpoint ck = load_checkpoint(folder);
    const nlohmann::json& meta = ck.notes.at("metadata");
    EXPECT_EQ(meta.at("step").get<std::int64_t>(), step);
    EXPECT_EQ(meta.at("tokens_seen").get<std::int64_t>(), step * o.batch_size * o.seq_len);
    EXPECT_DOUBLE_EQ(meta.at("lr").get<double>(), learning_rate(o, step - 1));
    EXPECT_TRUE(meta.at("val_loss").is_number()) << meta.dump();  // measured at every kept step
    EXPECT_TRUE(meta.at("train_loss").is_number());
    EXPECT_EQ(meta.at("training").at("warmup"), o.warmup);
    EXPECT_TRUE(std::filesystem::exists(folder / "tok512.bin"));
    EXPECT_FALSE(std::filesystem::exists(folder / "optimizer.safetensors"));  // only resuming needs the moments
  }
  std::size_t folders = 0;
  for (const auto& e : std::filesystem::directory_iterator(o.out)) folders += e.is_directory();
  EXPECT_EQ(folders, steps.size()) << "no partial folder left behind";
  EXPECT_EQ(read_file(o.out / "step-12" / "model.safetensors"), read_file(o.out / "model.safetensors"));
  const auto manifest = nlohmann::json::parse(read_file(o.out / "checkpoints.json"));
  EXPECT_EQ(manifest.at("steps"), nlohmann::json(steps));
  EXPECT_EQ(manifest.at("finished"), true);
  EXPECT_EQ(manifest.at("schedule"), "log:4");

  // Step 4's weights are those of a run stopped at step 4.
  TrainOptions short_run = tiny(dir, false);
  short_run.stop_after = 4;
  TrainResult four = run_training(short_run);
  LoadedCheckpoint kept4 = load_checkpoint(o.out / "step-4");
  auto t4 = named(four);
  for (const auto& [name, t] : qeval_named_tensors(kept4.config, kept4.weights))
    EXPECT_TRUE(test::tensors_equal(t, t4.at(name))) << name;

  TrainOptions no_out = tiny(dir, false);
  no_out.keep = KeepSchedule::parse("4");
  EXPECT_THROW(run_training(no_out), Error);
}

// A run stopped early keeps its last step but is not finished; resumed, it completes the series.
TEST(Trainer, KeepCheckpointsAcrossAResume) {
  test::TempDir dir;
  TrainOptions first = tiny(dir, false);
  first.out = dir / "run";
  first.keep = KeepSchedule::parse("4");
  first.stop_after = 6;
  run_training(first);
  auto manifest = nlohmann::json::parse(read_file(first.out / "checkpoints.json"));
  EXPECT_EQ(manifest.at("steps"), nlohmann::json({4, 6}));
  EXPECT_EQ(manifest.at("finished"), false);

  TrainOptions second = tiny(dir, false);
  second.out = dir / "run";
  second.resume = dir / "run";
  second.keep = KeepSchedule::parse("4");
  run_training(second);
  manifest = nlohmann::json::parse(read_file(second.out / "checkpoints.json"));
  EXPECT_EQ(manifest.at("steps"), nlohmann::json({4, 6, 8, 12}));
  EXPECT_EQ(manifest.at("finished"), true);
}

}  // namespace
}  // namespace qeval::train
