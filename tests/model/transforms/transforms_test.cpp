// Model transforms (transforms/, eval/model_transforms.h): the orthogonal matrices, and that
// rotate and smooth leave the full-precision function unchanged on random models of both
// families, stories260K and (when fetched) SmolLM2-135M, while rotate removes a planted outlier
// channel and its int8 per-tensor penalty.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "common/model_cache.h"
#include "eval/model_transforms.h"
#include "loaders/checkpoints/checkpoint.h"
#include "model/observer.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"
#include "transforms/orthogonal.h"
#include "transforms/rotate.h"
#include "transforms/smooth.h"

namespace qeval {
namespace {

at::Tensor eye(std::int64_t n) { return at::eye(n, at::kDouble); }

// max |a − b| / max |b|: the "relative" of the 1e-4 (per-element relative error is
// meaningless for logits near zero).
double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / b.to(at::kDouble).abs().max().item<double>();
}

at::Tensor random_tokens(std::int64_t vocab, std::int64_t batch, std::int64_t length, std::uint64_t seed) {
  at::manual_seed(seed);
  return at::randint(vocab, {batch, length}, at::kLong);
}

Transformer transformed(const Transformer& model, const std::vector<std::string>& specs, nlohmann::json* report = nullptr) {
  std::vector<TransformSpec> parsed;
  for (const auto& s : specs) parsed.push_back(parse_transform(s));
  // Calibration on random windows of the model's vocabulary (these tests check equivalence,
  // which holds for any calibration).
  CalibrationSource calibration = [&](const std::string&, std::int64_t n) {
    CalibrationWindows c;
    at::Tensor t = random_tokens(model.config().vocab_size, n, 24, 99);
    for (std::int64_t i = 0; i < n; ++i) {
      Window w;
      w.index = i;
      for (std::int64_t j = 0; j < t.size(1); ++j) w.tokens.push_back(static_cast<std::int32_t>(t[i][j].item<std::int64_t>()));
      c.windows.push_back(w);
    }
    c.description = {{"windows", n}};
    return c;
  };
  nlohmann::json local;
  return apply_transforms(model, parsed, calibration, report ? *report : local);
}

TEST(Orthogonal, HadamardMatricesHaveOrthogonalRowsForEveryConstructedOrder) {
  for (std::int64_t n : {1, 2, 4, 8, 12, 20, 24, 44, 48, 64, 128, 576, 768, 1536}) {
    at::Tensor h = hadamard_matrix(n);
    ASSERT_TRUE(h.defined()) << "order " << n;
    EXPECT_TRUE(at::equal(h.abs(), at::ones({n, n}, at::kDouble))) << "order " << n << ": entries must be ±1";
    EXPECT_TRUE(at::equal(at::matmul(h, h.t()), n * eye(n))) << "order " << n << " (" << hadamard_factors(n) << ")";
  }
  EXPECT_EQ(hadamard_factors(576), "12 x 12 x 4");
  EXPECT_EQ(hadamard_factors(768), "12 x 64");
  EXPECT_EQ(hadamard_factors(40), "20 x 2");
  EXPECT_EQ(hadamard_factors(180), "180");  // Paley with q = 179
  for (std::int64_t n : {3, 6, 18, 36, 56}) EXPECT_FALSE(hadamard_matrix(n).defined()) << "order " << n;
  EXPECT_TRUE(test::throws_with([] { randomized_hadamard(18, 0); }, {"18", "kind=orthogonal"}));
}

TEST(Orthogonal, RandomisedHadamardAndRandomOrthogonalAreOrthogonalAndInvertExactlyToRounding) {
  for (std::int64_t n : {64, 576}) {
    for (const at::Tensor& q : {randomized_hadamard(n, 7), random_orthogonal(n, 7)}) {
      EXPECT_LT((at::matmul(q.t(), q) - eye(n)).abs().max().item<double>(), 1e-12) << n;
      at::Tensor x = at::randn({5, n}, at::kDouble);
      EXPECT_TRUE(test::tensors_close(at::matmul(at::matmul(x, q), q.t()), x, 1e-12));
      // In fp32, as the model uses it: QᵀQ = I within 1e-5.
      at::Tensor q32 = q.to(at::kFloat);
      EXPECT_LT((at::matmul(q32.t(), q32) - at::eye(n)).abs().max().item<float>(), 1e-5) << n;
    }
  }
  EXPECT_TRUE(at::equal(random_orthogonal(32, 3), random_orthogonal(32, 3)));
  EXPECT_FALSE(at::equal(random_orthogonal(32, 3), random_orthogonal(32, 4)));
  EXPECT_FALSE(at::equal(randomized_hadamard(32, 3), randomized_hadamard(32, 4)));
  // A randomised Hadamard spreads every coordinate evenly: |Q_ij| = 1/sqrt(n).
  EXPECT_TRUE(test::tensors_close(randomized_hadamard(64, 1).abs(), at::full({64, 64}, 0.125, at::kDouble), 1e-15));
}

struct Family {
  const char* name;
  bool gpt2;
};

class TransformsKeepTheFunction : public ::testing::TestWithParam<Family> {};

TEST_P(TransformsKeepTheFunction, RotateSmoothAndBothLeaveTheLogitsUnchanged) {
  const Transformer model = test::random_transformer(11, GetParam().gpt2, 64, 48, 3);
  const at::Tensor tokens = random_tokens(64, 2, 20, 5);
  const at::Tensor reference = model.forward(tokens);
  for (const std::vector<std::string>& specs :
       std::vector<std::vector<std::string>>{{"rotate"},
                                             {"rotate:kind=orthogonal,seed=3"},
                                             {"rotate:online_down=1"},
                                             {"smooth"},
                                             {"smooth:alpha=0.85,groups=qkv+o"},
                                             {"rotate", "smooth"},
                                             {"smooth", "rotate:kind=orthogonal"}}) {
    std::string label;
    for (const auto& s : specs) label += s + " ";
    nlohmann::json report;
    Transformer t = transformed(model, specs, &report);
    const double diff = relative_difference(t.forward(tokens), reference);
    EXPECT_LT(diff, 1e-5) << GetParam().name << ": " << label;
    ASSERT_EQ(report.size(), specs.size());
    EXPECT_EQ(report[0]["spec"], specs[0]);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TransformsKeepTheFunction,
                         ::testing::Values(Family{"llama", false}, Family{"gpt2", true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Transforms, RotateFoldsLayerNormIntoRmsNormAndUntiesEmbeddings) {
  const Transformer model = test::random_transformer(12, /*gpt2=*/true, 64, 48, 2);
  ASSERT_TRUE(model.config().tied_embeddings);
  nlohmann::json report;
  Transformer t = transformed(model, {"rotate"}, &report);
  EXPECT_EQ(t.config().norm, NormKind::rmsnorm);
  EXPECT_FALSE(t.config().tied_embeddings);
  EXPECT_TRUE(t.weights().lm_head_bias.defined());  // the final LayerNorm's bias
  EXPECT_EQ(report[0]["fold"]["norm_before"], "layernorm");
  EXPECT_EQ(report[0]["fold"]["centered_residual_stream"], true);
  EXPECT_LT(report[0]["orthogonality_error"].get<double>(), 1e-12);
  // The original model is untouched (transforms make new tensors).
  EXPECT_EQ(model.config().norm, NormKind::layernorm);
}

TEST(Transforms, SmoothWidensRmsNormSingleAndSkipsDownForGelu) {
  Transformer gpt2 = test::random_transformer(13, /*gpt2=*/true, 64, 32, 2);
  nlohmann::json report;
  transformed(gpt2, {"smooth"}, &report);
  ASSERT_EQ(report[0]["skipped"].size(), 1u);
  EXPECT_EQ(report[0]["skipped"][0]["group"], "down");

  const Transformer llama = test::random_transformer(14, false, 64, 32, 2);
  ModelConfig c = llama.config();
  ModelWeights w = llama.weights();
  c.norm = NormKind::rmsnorm_single;
  for (auto& b : w.blocks) b.attn_norm.weight = at::full({1}, 1.3), b.mlp_norm.weight = at::full({1}, 0.7);
  w.final_norm.weight = at::full({1}, 1.1);
  const Transformer single(c, w, "rmsnorm_single model");
  const at::Tensor tokens = random_tokens(64, 1, 16, 2);
  Transformer t = transformed(single, {"smooth"}, &report);
  EXPECT_EQ(t.config().norm, NormKind::rmsnorm);
  EXPECT_LT(relative_difference(t.forward(tokens), single.forward(tokens)), 1e-5);
}

TEST(Transforms, BadSpecsFailNamingTheKey) {
  EXPECT_TRUE(test::throws_with([] { parse_transform("spin"); }, {"spin", "rotate or smooth"}));
  EXPECT_TRUE(test::throws_with([] { parse_transform("rotate:sed=1"); }, {"sed", "kind, seed, online_down"}));
  EXPECT_TRUE(test::throws_with([] { parse_transform("smooth:alpha"); }, {"alpha", "key=value"}));
  EXPECT_TRUE(test::throws_with([] { parse_transform("rotate:seed=1,seed=2"); }, {"seed", "twice"}));
  const Transformer model = test::random_transformer(15, false, 64, 32, 1);
  EXPECT_TRUE(test::throws_with([&] { transformed(model, {"rotate:seed=-1"}); }, {"seed=-1", "non-negative"}));
  EXPECT_TRUE(test::throws_with([&] { transformed(model, {"rotate:kind=givens"}); }, {"givens", "hadamard or orthogonal"}));
  EXPECT_TRUE(test::throws_with([&] { transformed(model, {"smooth:alpha=2"}); }, {"alpha", "[0, 1]"}));
  EXPECT_TRUE(test::throws_with([&] { transformed(model, {"smooth:groups=qkv+ffn"}); }, {"ffn", "qkv, up, down, o"}));
  // d_model 48 = 12 x 4 has a Hadamard matrix; 56 = 8 x 7 has none here.
  const Transformer odd = test::random_transformer(16, false, 64, 56, 1);
  EXPECT_TRUE(test::throws_with([&] { transformed(odd, {"rotate"}); }, {"order 56", "kind=orthogonal"}));
  EXPECT_NO_THROW(transformed(odd, {"rotate:kind=orthogonal"}));
}

// Mean kurtosis over positions of the last block's output (population moments over channels).
struct LastBlockKurtosis : ForwardObserver {
  std::int64_t last;
  double kurtosis = 0;
  explicit LastBlockKurtosis(std::int64_t layers) : last(layers - 1) {}
  void on_block_output(std::int64_t layer, const at::Tensor& hidden) override {
    if (layer != last) return;
    at::Tensor x = hidden.to(at::kDouble);
    at::Tensor c = x - x.mean(-1, true);
    kurtosis = (c.pow(4).mean(-1) / c.pow(2).mean(-1).pow(2)).mean().item<double>();
  }
};

// Mean NLL of next-token predictions of `model` against `tokens`.
double mean_nll(const Transformer& model, const at::Tensor& tokens) {
  at::Tensor logits = model.forward(tokens).narrow(1, 0, tokens.size(1) - 1).to(at::kDouble);
  at::Tensor logp = at::log_softmax(logits, -1);
  return -logp.gather(-1, tokens.narrow(1, 1, tokens.size(1) - 1).unsqueeze(-1)).mean().item<double>();
}

TEST(Transforms, RotateRemovesAPlantedOutlierChannelAndCutsTheInt8ModeratePenalty) {
  // A residual stream with one privileged channel, as Adam grows them: channel 5 of the
  // embeddings and of every residual writer is 40 times larger.
  const Transformer base = test::random_transformer(21, false, 64, 64, 3);
  ModelWeights w = base.weights();
  const std::int64_t channel = 5;
  auto plant = [&](at::Tensor t, std::int64_t dim) {
    t = t.clone();
    t.select(dim, channel).mul_(40);
    return t;
  };
  w.token_embedding = plant(w.token_embedding, 1);
  for (auto& b : w.blocks) b.o.weight = plant(b.o.weight, 0), b.down.weight = plant(b.down.weight, 0);
  const Transformer planted(base.config(), w, "planted outlier channel");
  const Transformer rotated = transformed(planted, {"rotate"});

  const at::Tensor tokens = random_tokens(64, 4, 48, 8);
  LastBlockKurtosis before(3), after(3);
  planted.forward(tokens, &before);
  rotated.forward(tokens, &after);
  const SchemeSpec moderate = preset_scheme("int8-moderate");
  const double penalty_before = mean_nll(quantize_model(planted, moderate).model, tokens) - mean_nll(planted, tokens);
  const double penalty_after = mean_nll(quantize_model(rotated, moderate).model, tokens) - mean_nll(rotated, tokens);
  std::cout << "planted outlier channel: residual kurtosis " << before.kurtosis << " -> " << after.kurtosis
            << "; int8-moderate penalty (mean NLL) " << penalty_before << " -> " << penalty_after << "\n";
  EXPECT_GT(before.kurtosis, 20);
  EXPECT_LT(after.kurtosis, 4.5);
  EXPECT_LT(penalty_after, 0.5 * penalty_before);
}

void expect_transforms_keep_real_model(const std::filesystem::path& path, std::int64_t length, double tolerance) {
  LoadedCheckpoint ck = load_checkpoint(path);
  const Transformer model(ck.config, ck.weights, path.string());
  const at::Tensor tokens = random_tokens(ck.config.vocab_size, 1, length, 3);
  const at::Tensor reference = model.forward(tokens);
  for (const std::vector<std::string>& specs :
       std::vector<std::vector<std::string>>{{"rotate"}, {"rotate:kind=orthogonal"}, {"smooth"}, {"rotate", "smooth"}}) {
    const double diff = relative_difference(transformed(model, specs).forward(tokens), reference);
    std::cout << path.filename().string() << " " << specs[0] << (specs.size() > 1 ? "+" + specs[1] : "")
              << ": max |logit difference| / max |logit| = " << diff << "\n";
    EXPECT_LT(diff, tolerance) << specs[0];
  }
}

TEST(Transforms, Stories260kLogitsUnchangedWithin1e4Relative) {
  expect_transforms_keep_real_model(test::data_path("models/stories260K/stories260K.bin"), 64, 1e-4);
}

TEST(Transforms, SmolLM2LogitsUnchangedWithin1e4Relative) {
  const std::filesystem::path path = *model_handle_path("smollm2-135m");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent: run scripts/models to test the real model";
  expect_transforms_keep_real_model(path, 64, 1e-4);
}

}  // namespace
}  // namespace qeval
