// Training a layer pattern (docs/usage.md "Training a layer pattern"): Mamba (S6), Mamba-2 and
// sliding-window attention layers with dense MLPs or none. Mamba's initialisation, the loss falling
// on a tiny hybrid, every state-space parameter but A trained, checkpoints that load through
// load_checkpoint with the trainer's logits and the same config, a bit-identical resume, and the
// command line's options and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/qeval_checkpoint.h"
#include "model/init.h"
#include "model/transformer.h"
#include "tests/cli/run_qeval.h"
#include "tests/support/test_data.h"
#include "train/trainer.h"

namespace qeval::train {
namespace {

std::filesystem::path small_text(const test::TempDir& dir) {
  std::string text = read_file(test::data_path("text/tinystories/validation-head.txt"));
  auto path = dir / "stories.txt";
  test::write_bytes(path, text.substr(0, text.find("\n\n", 15000)));
  return path;
}

// Llama-style switches with the layer pattern `mixers` (ffns: dense everywhere unless given) and
// a window of 8 on the attention layers.
ModelConfig pattern_config(std::vector<MixerKind> mixers, std::vector<FfnKind> ffns = {}) {
  ModelConfig c;
  c.architecture = "llama";
  c.d_model = 32;
  c.n_layers = static_cast<std::int64_t>(mixers.size());
  c.n_heads = c.n_kv_heads = 4;
  c.d_ff = 96;
  c.norm = NormKind::rmsnorm;
  c.position = PositionKind::rope;
  c.mlp = MlpKind::swiglu;
  c.layer_mixers = mixers;
  c.layer_ffns = ffns.empty() ? std::vector<FfnKind>(mixers.size(), FfnKind::dense) : ffns;
  for (MixerKind m : mixers) c.attention_windows.push_back(m == MixerKind::attention ? 8 : 0);
  c.ssm_d_inner = 64;
  c.ssm_d_state = 8;
  c.ssm_d_conv = 4;
  c.ssm_dt_rank = 2;
  c.ssm_heads = 4;  // Mamba-2: heads of 16
  return c;
}

TrainOptions tiny(const test::TempDir& dir, ModelConfig model) {
  TrainOptions o;
  o.data = small_text(dir);
  o.tokenizer = test::data_path("models/stories260K/tok512.bin");  // the llama2.c export: SentencePiece cannot load under ASan
  o.model = std::move(model);
  o.seq_len = 32;
  o.batch_size = 4;
  o.steps = 12;
  o.warmup = 3;
  o.lr = 3e-3;
  o.val_every = 0;
  o.val_windows = 16;
  o.log_every = 4;
  o.progress = false;
  o.optimizer.kind = "adamw";
  o.seed = 5;
  return o;
}

TEST(LayerPatternInit, MambaFollowsItsInitialisation) {
  ModelConfig c = pattern_config({MixerKind::mamba, MixerKind::attention, MixerKind::mamba2},
                                 {FfnKind::dense, FfnKind::dense, FfnKind::none});
  c.vocab_size = 64;
  c.max_seq_len = 32;
  c.validate("test");
  const ModelWeights w = init_weights(c, 3);
  validate_weights(w, c, "init");
  const SsmWeights& s = w.blocks[0].ssm;
  const std::int64_t E = c.ssm_d_inner, N = c.ssm_d_state;
  // S4D-real A = −[1..N] on every channel, D = 1.
  const at::Tensor row = -at::arange(1, N + 1, at::kFloat);
  for (std::int64_t e : {std::int64_t{0}, E - 1}) EXPECT_TRUE(s.A[e].equal(row)) << e;
  EXPECT_TRUE(s.D.equal(at::ones({E})));
  // softplus(dt bias) = Δ in [0.001, 0.1], spread over the range (log-uniform).
  const at::Tensor dt = at::softplus(s.dt_proj.bias.to(at::kDouble));
  EXPECT_GE(dt.min().item<double>(), 0.001 * (1 - 1e-5));
  EXPECT_LE(dt.max().item<double>(), 0.1 * (1 + 1e-5));
  EXPECT_LT(dt.min().item<double>(), 0.003);
  EXPECT_GT(dt.max().item<double>(), 0.03);
  EXPECT_LE(s.dt_proj.weight.abs().max().item<double>(), 1 / std::sqrt(2.0));
  EXPECT_LE(s.conv_weight.abs().max().item<double>(), 0.5);  // 1/√d_conv
  EXPECT_LE(s.conv_bias.abs().max().item<double>(), 0.5);
  EXPECT_NEAR(s.in_proj.weight.std().item<double>(), 0.02, 0.002);
  // Mamba-2: A = −[1..H], D = 1, its gated norm at 1, no MLP after it (FFN none).
  const SsmWeights& s2 = w.blocks[2].ssm;
  EXPECT_TRUE(s2.A.equal(-at::arange(1, 5, at::kFloat)));
  EXPECT_TRUE(s2.norm.weight.equal(at::ones({E})));
  const at::Tensor dt2 = at::softplus(s2.dt_bias);
  EXPECT_TRUE((dt2 >= 0.00099).all().item<bool>() && (dt2 <= 0.10001).all().item<bool>());
  EXPECT_FALSE(w.blocks[2].mlp_norm.weight.defined());
  EXPECT_FALSE(w.blocks[2].up.weight.defined());

  // Mixture of experts is refused, naming the layer.
  ModelConfig moe = c;
  moe.layer_ffns[1] = FfnKind::moe;
  EXPECT_TRUE(test::throws_with([&] { init_weights(moe, 3); }, {"layer 1", "mixture-of-experts"}));
}

// The loss falls on a tiny hybrid (Mamba + MLP, windowed attention + MLP), and on a Mamba-2 one.
TEST(LayerPatternTraining, LossFallsOnATinyHybrid) {
  for (MixerKind ssm : {MixerKind::mamba, MixerKind::mamba2}) {
    SCOPED_TRACE(to_string(ssm));
    test::TempDir dir;
    TrainOptions o = tiny(dir, pattern_config({ssm, MixerKind::attention}));
    o.steps = 40;
    o.warmup = 4;
    o.val_every = 20;
    TrainResult r = run_training(o);
    ASSERT_EQ(r.step, 40);
    const double first = r.history.front().at("train_loss").get<double>();
    const double last = r.history.back().at("train_loss").get<double>();
    EXPECT_NEAR(first, std::log(512.0), 0.5);
    EXPECT_LT(last, first - 1.0) << "first " << first << " last " << last;
    EXPECT_LT(r.val_loss, first - 1.0);
  }
}

// Every trainable tensor of a Mamba layer moved (the optimizer holds them all); A did not (kept at
// its S4D-real initialisation, docs/usage.md).
TEST(LayerPatternTraining, EveryStateSpaceParameterButATrains) {
  test::TempDir dir;
  TrainOptions o = tiny(dir, pattern_config({MixerKind::mamba, MixerKind::attention}));
  o.optimizer.kind = "orthoadam";  // a rotation per axis: 1-D biases, D and the [E, K] conv included
  TrainResult r = run_training(o);
  ModelConfig c = r.config;
  const auto before = qeval_named_tensors(c, init_weights(c, o.seed, o.init_std));
  const auto after = qeval_named_tensors(c, r.weights);
  ASSERT_EQ(before.size(), after.size());
  int ssm = 0;
  for (const auto& [name, t] : after) {
    if (name == "layers.0.mamba.A") {
      EXPECT_TRUE(t.equal(before.at(name))) << name;
    } else {
      EXPECT_FALSE(t.equal(before.at(name))) << name << " did not train";
    }
    if (name.rfind("layers.0.mamba.", 0) == 0) ++ssm;
  }
  EXPECT_EQ(ssm, 9);  // the nine below
  for (const char* name : {"layers.0.mamba.in_proj.weight", "layers.0.mamba.conv.weight", "layers.0.mamba.conv.bias",
                           "layers.0.mamba.x_proj.weight", "layers.0.mamba.dt_proj.weight", "layers.0.mamba.dt_proj.bias",
                           "layers.0.mamba.A", "layers.0.mamba.D", "layers.0.mamba.out_proj.weight"})
    EXPECT_TRUE(after.count(name)) << name;
}

// The checkpoint loads through load_checkpoint as the same model: same config (pattern, windows,
// SSM sizes), same tensors, the same logits as the trainer's weights; and a run resumed from a
// checkpoint of step 5 ends bit-identical to the straight run.
TEST(LayerPatternTraining, CheckpointLoadsAsTheSameModelAndResumes) {
  test::TempDir dir;
  TrainOptions o = tiny(dir, pattern_config({MixerKind::mamba, MixerKind::attention, MixerKind::mamba}));
  o.out = dir / "ck";
  TrainResult r = run_training(o);
  LoadedCheckpoint ck = load_checkpoint(o.out);
  EXPECT_EQ(ck.format, "qeval");
  EXPECT_EQ(config_to_json(ck.config), config_to_json(r.config));
  EXPECT_EQ(ck.config.layer_mixers, r.config.layer_mixers);
  EXPECT_EQ(ck.config.layer_ffns, r.config.layer_ffns);
  EXPECT_EQ(ck.config.attention_windows, (std::vector<std::int64_t>{0, 8, 0}));
  EXPECT_EQ(ck.config.ssm_dt_rank, 2);
  const auto saved = qeval_named_tensors(ck.config, ck.weights), trained = qeval_named_tensors(r.config, r.weights);
  ASSERT_EQ(saved.size(), trained.size());
  for (const auto& [name, t] : trained) EXPECT_TRUE(test::tensors_equal(saved.at(name), t)) << name;
  at::manual_seed(1);
  const at::Tensor tokens = at::randint(0, 512, {2, 32}, at::kLong);
  EXPECT_TRUE(test::tensors_equal(Transformer(ck.config, ck.weights).forward(tokens),
                                  Transformer(r.config, r.weights).forward(tokens)));
  const nlohmann::json training = ck.notes.at("metadata").at("training");
  EXPECT_NE(training.at("frozen").get<std::string>().find("A"), std::string::npos);

  TrainOptions first = tiny(dir, o.model);
  first.out = dir / "half";
  first.stop_after = 5;
  run_training(first);
  TrainOptions second = tiny(dir, o.model);
  second.resume = dir / "half";
  TrainResult b = run_training(second);
  const auto resumed = qeval_named_tensors(b.config, b.weights);
  for (const auto& [name, t] : trained) EXPECT_TRUE(test::tensors_equal(resumed.at(name), t)) << name;
}

// The command line: a pattern, a window and the SSM sizes reach the checkpoint's config; `qeval
// eval` runs the checkpoint (full precision and int8 on the Mamba projections too); bad patterns
// and options that a pattern does not use are refused, naming them.
TEST(LayerPatternCli, OptionsReachTheCheckpointAndBadPatternsAreRefused) {
  test::TempDir dir;
  const std::string data = small_text(dir).string(), tok = test::data_path("models/stories260K/tok512.bin").string();
  const std::string common = "train -q --data " + data + " --tokenizer " + tok +
                             " --arch llama --d-model 32 --seq-len 32 --batch-size 2 --steps 2 --warmup 1"
                             " --threads 1";
  const std::string out = (dir / "ck").string();
  auto r = test::run_qeval(common + " --n-layers 3 --layer-pattern mamba:dense,attention:dense --attention-window 8"
                           " --ssm-state 4 --ssm-expand 3 --ssm-conv 3 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const ModelConfig c = load_checkpoint(out).config;
  EXPECT_EQ(c.layer_mixers, (std::vector<MixerKind>{MixerKind::mamba, MixerKind::attention, MixerKind::mamba}));
  EXPECT_EQ(c.layer_ffns, std::vector<FfnKind>(3, FfnKind::dense));
  EXPECT_EQ(c.attention_windows, (std::vector<std::int64_t>{0, 8, 0}));
  EXPECT_EQ(c.ssm_d_state, 4);
  EXPECT_EQ(c.ssm_d_inner, 96);
  EXPECT_EQ(c.ssm_d_conv, 3);
  EXPECT_EQ(c.ssm_dt_rank, 2);  // ⌈32 / 16⌉
  EXPECT_EQ(c.position, PositionKind::rope);
  r = test::run_qeval("eval -q --model " + out + " --data " + data + " --seq-len 32 --max-windows 4 --schemes "
                      "full,int8-fine --threads 1");
  EXPECT_EQ(r.status, 0) << r.output;

  // Mamba-only: no attention layer, so no rotary positions by default.
  const std::string mamba_only = (dir / "mamba").string();
  r = test::run_qeval(common + " --n-layers 2 --layer-pattern mamba:dense --out " + mamba_only);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(load_checkpoint(mamba_only).config.position, PositionKind::none);

  struct Refusal {
    std::string options, expected;
  };
  for (const Refusal& bad : std::vector<Refusal>{
           {"--layer-pattern mamba:dens", "'mamba:dens'"},
           {"--layer-pattern mamba:dense,mambo:dense", "unknown mixer 'mambo'"},
           {"--layer-pattern mamba", "'mamba' has no ':'"},
           {"--layer-pattern attention:moe", "mixture-of-experts"},
           {"--layer-pattern mamba:dense,attention:dense,mamba:none,attention:none,mamba:dense", "5 entries for --n-layers 4"},
           {"--layer-pattern mamba:dense --norm layernorm", "need --norm rmsnorm"},
           {"--layer-pattern mamba:dense --position rope", "no attention layer"},
           {"--layer-pattern mamba:dense --attention-window 8", "--attention-window 8"},
           // Issue 63: attention-only options on an attention-free pattern shape nothing (a Mamba model
           // was recorded as a softmax-1 one), nor do MLP options without a dense MLP.
           {"--layer-pattern mamba:dense --softmax softmax1", "--softmax: --layer-pattern 'mamba:dense' has no attention layer"},
           {"--layer-pattern mamba:dense --n-heads 8", "--n-heads: --layer-pattern 'mamba:dense' has no attention layer"},
           {"--layer-pattern mamba2:dense --n-kv-heads 2", "--n-kv-heads"},
           {"--layer-pattern mamba:none --d-ff 64", "--d-ff: --layer-pattern 'mamba:none' has no dense MLP"},
           {"--optimizer adam --momentum 0.5", "--momentum: SGD's"},
           {"--optimizer sgd --beta2 0.9", "--beta2: Adam's"},
           {"--optimizer adamw --dense-max 64", "--dense-max: OrthoAdam's"},
           {"--ssm-state 8", "--ssm-state"},
           {"--layer-pattern mamba2:dense --ssm-dt-rank 4", "--ssm-dt-rank"},
           {"--layer-pattern mamba2:dense --ssm-head-dim 48", "--ssm-head-dim 48"},
       }) {
    r = test::run_qeval(common + " --n-layers 4 " + bad.options);
    EXPECT_NE(r.status, 0) << bad.options;
    EXPECT_TRUE(test::contains(r.output, bad.expected)) << bad.options << "\n" << r.output;
  }
}

}  // namespace
}  // namespace qeval::train
