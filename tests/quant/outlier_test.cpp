// Planted outliers (the paper's mechanism in miniature). A random Llama-style model gets one
// hidden channel of huge magnitude at the input of every linear (its RMSNorm gains scaled up);
// per-tensor activation scales then crush every other channel, per-feature scales do not, so
// the mean NLL penalty orders coarse ≥ moderate > fine. Separately, a few weight rows with one
// huge weight each make per-channel 4-bit quantisation of those rows useless.
//
// The tokens are sampled from the full-precision model being quantised, so its predictions are
// right about the data and the expected penalty of any perturbation is positive (it is the KL
// divergence from the full model); the penalty is the mean per-token NLL difference.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "tests/quant/quant_models.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

using test::per_token_nll;

// B sequences of L tokens sampled from `model`, starting from random first tokens.
at::Tensor sample(const Transformer& model, std::int64_t B, std::int64_t L, std::uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor tokens = at::randint(0, model.config().vocab_size, {B, 1}, at::kLong);
  for (std::int64_t l = 1; l < L; ++l) {
    at::Tensor probs = at::softmax(model.forward(tokens).select(1, l - 1), -1);  // [B, V]
    tokens = at::cat({tokens, at::multinomial(probs, 1)}, 1);
  }
  return tokens;
}

double penalty(const Transformer& full, const std::string& scheme, const at::Tensor& tokens) {
  QuantizedModel q = quantize_model(full, preset_scheme(scheme));
  return (per_token_nll(q.model, tokens) - per_token_nll(full, tokens)).mean().item<double>();
}

Transformer with_weights(const Transformer& base, const std::function<void(ModelWeights&)>& edit) {
  ModelWeights w = base.weights();
  edit(w);
  return Transformer(base.config(), w, "planted outlier model");
}

TEST(PlantedOutlier, ActivationOutlierPenaltyLadderOrdersCoarseModerateFine) {
  const Transformer base = test::random_transformer(31, /*gpt2=*/false, /*vocab=*/128, /*d=*/128, /*layers=*/2);
  const std::int64_t channel = 17;
  const double gain = 60.0;
  Transformer outlier = with_weights(base, [&](ModelWeights& w) {
    for (auto& b : w.blocks)
      for (NormWeights* n : {&b.attn_norm, &b.mlp_norm}) {
        n->weight = n->weight.clone();
        n->weight[channel] *= gain;
      }
  });
  const at::Tensor tokens = sample(outlier, 8, 64, 7);
  const double fine = penalty(outlier, "int8-fine", tokens);
  const double moderate = penalty(outlier, "int8-moderate", tokens);
  const double coarse = penalty(outlier, "int8-coarse", tokens);
  const double clean_moderate = penalty(base, "int8-moderate", sample(base, 8, 64, 7));
  std::printf("outlier channel: fine %.4f, moderate %.4f, coarse %.4f; no outlier: moderate %.4f\n", fine, moderate,
              coarse, clean_moderate);
  EXPECT_GE(coarse, moderate);
  EXPECT_GT(moderate, fine);
  // "Much worse", not a hair: the outlier makes per-tensor scales an order of magnitude costlier.
  EXPECT_GT(moderate, 10 * std::max(fine, 1e-3));
  EXPECT_GT(moderate, 10 * std::max(clean_moderate, 1e-3));
}

TEST(PlantedOutlier, OutlierWeightRowsMakeW4PerChannelMuchWorse) {
  const Transformer base = test::random_transformer(32, /*gpt2=*/false, /*vocab=*/128, /*d=*/256, /*layers=*/2);
  // Every 8th output row of every block linear gets one weight 40× the row's largest.
  Transformer outlier = with_weights(base, [&](ModelWeights& w) {
    for (auto& b : w.blocks)
      for (LinearWeights* l : {&b.q, &b.k, &b.v, &b.o, &b.gate, &b.up, &b.down}) {
        l->weight = l->weight.clone();
        for (std::int64_t row = 0; row < l->weight.size(0); row += 8)
          l->weight[row][(row * 7) % l->weight.size(1)] = 40 * l->weight[row].abs().max().item<float>();
      }
  });
  const double clean = penalty(base, "w4-zeropoint", sample(base, 8, 64, 9));
  const at::Tensor tokens = sample(outlier, 8, 64, 9);
  const double with_outliers = penalty(outlier, "w4-zeropoint", tokens);
  const double grouped = penalty(outlier, "w4-zeropoint-g128", tokens);
  std::printf("w4 per channel: clean %.4f, outlier rows %.4f; g128 with outlier rows %.4f\n", clean, with_outliers,
              grouped);
  EXPECT_GT(with_outliers, 3 * std::max(clean, 1e-3));
  // Groups of 128 confine each outlier to its group: better than whole rows.
  EXPECT_LT(grouped, with_outliers);
}

}  // namespace
}  // namespace qeval
