// LinearInputRecorder on random models: the wrapped model's logits equal the unwrapped ones bit
// for bit, and the statistics equal a hand computation on inputs obtained independently (the
// first block's norm recomputed from the embeddings, and a test-local capturing decorator).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "stats/linear_inputs.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

at::Tensor random_tokens(std::uint64_t seed, std::int64_t B, std::int64_t L, std::int64_t vocab = 64) {
  at::manual_seed(seed);
  return at::randint(0, vocab, {B, L}, at::kLong);
}

// What the recorder should report for one linear, from its inputs [B, L, in], by plain loops.
struct Expected {
  double kurtosis_first = 0, kurtosis_rest = 0, max_abs_first = 0, max_abs_rest = 0, ratio_first = 0, ratio_rest = 0;
  double largest = 0;
  std::int64_t largest_feature = -1, largest_position = -1, largest_sequence = -1, sequences = 0;
  std::vector<double> feature_max;
};

void add_inputs(Expected& e, const at::Tensor& input) {
  at::Tensor x = input.to(at::kDouble).contiguous();
  const std::int64_t B = x.size(0), L = x.size(1), D = x.size(2);
  if (e.feature_max.empty()) e.feature_max.assign(static_cast<std::size_t>(D), 0.0);
  auto a = x.accessor<double, 3>();
  for (std::int64_t b = 0; b < B; ++b) {
    double rest_k = 0, rest_m = 0, rest_r = 0;
    for (std::int64_t l = 0; l < L; ++l) {
      double mean = 0, sq = 0, mx = 0;
      for (std::int64_t j = 0; j < D; ++j) mean += a[b][l][j];
      mean /= static_cast<double>(D);
      double m2 = 0, m4 = 0;
      for (std::int64_t j = 0; j < D; ++j) {
        const double v = a[b][l][j], c = v - mean;
        m2 += c * c;
        m4 += c * c * c * c;
        sq += v * v;
        mx = std::max(mx, std::abs(v));
        auto& f = e.feature_max[static_cast<std::size_t>(j)];
        f = std::max(f, std::abs(v));
        if (e.largest_sequence < 0 || std::abs(v) > std::abs(e.largest)) {
          e.largest = v;
          e.largest_feature = j;
          e.largest_position = l;
          e.largest_sequence = e.sequences;
        }
      }
      m2 /= static_cast<double>(D);
      m4 /= static_cast<double>(D);
      const double k = m4 / (m2 * m2), r = mx / std::sqrt(sq);
      if (l == 0) {
        e.kurtosis_first += k, e.max_abs_first += mx, e.ratio_first += r;
      } else {
        rest_k += k, rest_m += mx, rest_r += r;
      }
    }
    e.kurtosis_rest += rest_k / static_cast<double>(L - 1);
    e.max_abs_rest += rest_m / static_cast<double>(L - 1);
    e.ratio_rest += rest_r / static_cast<double>(L - 1);
    e.sequences += 1;
  }
}

void expect_summary(const LinearInputSummary& got, const Expected& e, const at::Tensor& feature_max_abs) {
  const double n = static_cast<double>(e.sequences);
  SCOPED_TRACE(got.name);
  EXPECT_EQ(got.sequences, e.sequences);
  EXPECT_EQ(got.rest_sequences, e.sequences);
  auto near = [](double got, double expected) { EXPECT_NEAR(got, expected, 1e-10 * std::max(1.0, std::abs(expected))); };
  near(got.kurtosis_first, e.kurtosis_first / n);
  near(got.kurtosis_rest, e.kurtosis_rest / n);
  near(got.max_abs_first, e.max_abs_first / n);
  near(got.max_abs_rest, e.max_abs_rest / n);
  near(got.inf_over_l2_first, e.ratio_first / n);
  near(got.inf_over_l2_rest, e.ratio_rest / n);
  // max |x| is exact: equal, not near.
  EXPECT_EQ(got.largest_value, e.largest);
  EXPECT_EQ(got.largest_feature, e.largest_feature);
  EXPECT_EQ(got.largest_position, e.largest_position);
  EXPECT_EQ(got.largest_sequence, e.largest_sequence);
  ASSERT_EQ(feature_max_abs.numel(), static_cast<std::int64_t>(e.feature_max.size()));
  EXPECT_EQ(feature_max_abs.scalar_type(), at::kDouble);
  for (std::int64_t j = 0; j < feature_max_abs.numel(); ++j)
    EXPECT_EQ(feature_max_abs[j].item<double>(), e.feature_max[static_cast<std::size_t>(j)]) << "feature " << j;
}

// The test's own hook: keeps every input it is called with.
class CapturingLinear final : public LinearDecorator {
 public:
  explicit CapturingLinear(std::shared_ptr<const Linear> inner) : LinearDecorator(std::move(inner)) {}
  at::Tensor forward(const at::Tensor& x) const override {
    inputs.push_back(x.clone());
    return inner_->forward(x);
  }
  mutable std::vector<at::Tensor> inputs;
};

TEST(LinearInputs, WrappedLogitsEqualUnwrappedBitForBit) {
  for (bool gpt2 : {false, true}) {
    Transformer model = test::random_transformer(11, gpt2);
    Transformer wrapped = model;
    auto recorder = record_linear_inputs(wrapped);
    EXPECT_EQ(recorder->names().size(), model.linears().size());
    at::Tensor tokens = random_tokens(3, 3, 17);
    EXPECT_TRUE(test::tensors_equal(wrapped.forward(tokens), model.forward(tokens))) << (gpt2 ? "gpt2" : "llama");
    // The original model is untouched: copies own their linear table.
    for (const auto& named : model.linears())
      EXPECT_NE(dynamic_cast<const FloatLinear*>(named.linear.get()), nullptr) << named.name;
  }
}

TEST(LinearInputs, FirstQInputEqualsTheBlockNormOfTheEmbeddings) {
  Transformer model = test::random_transformer(5);  // Llama-style: RMSNorm, no learned positions
  auto recorder = record_linear_inputs(model, {"layers.0.attn.q"});
  ASSERT_EQ(recorder->names(), std::vector<std::string>{"layers.0.attn.q"});
  at::Tensor tokens = random_tokens(8, 3, 12);
  model.forward(tokens);
  // Independently: the embedding rows, through the first block's attention RMSNorm.
  const auto& w = model.weights();
  at::Tensor x = w.token_embedding.index_select(0, tokens.reshape({-1})).reshape({3, 12, -1}).to(at::kDouble);
  at::Tensor normed = x / (x.square().mean(-1, true) + model.config().norm_eps).sqrt() * w.blocks[0].attn_norm.weight.to(at::kDouble);
  Expected e;
  add_inputs(e, normed);
  LinearInputSummary s = recorder->summary("layers.0.attn.q");
  // The norm is recomputed in float64, the model runs in float32: statistics agree to float
  // rounding, and max |x| too (not bitwise here, since the inputs themselves differ in rounding).
  const double n = 3;
  EXPECT_NEAR(s.kurtosis_first, e.kurtosis_first / n, 1e-4);
  EXPECT_NEAR(s.kurtosis_rest, e.kurtosis_rest / n, 1e-4);
  EXPECT_NEAR(s.max_abs_first, e.max_abs_first / n, 1e-5);
  EXPECT_NEAR(s.max_abs_rest, e.max_abs_rest / n, 1e-5);
  EXPECT_NEAR(s.inf_over_l2_first, e.ratio_first / n, 1e-6);
  EXPECT_NEAR(s.inf_over_l2_rest, e.ratio_rest / n, 1e-6);
  EXPECT_EQ(s.largest_feature, e.largest_feature);
  EXPECT_EQ(s.largest_position, e.largest_position);
  EXPECT_EQ(s.largest_sequence, e.largest_sequence);
  EXPECT_TRUE(test::tensors_close(recorder->feature_max_abs("layers.0.attn.q"),
                                  at::tensor(e.feature_max, at::kDouble), 1e-5, 1e-6));
  EXPECT_EQ(s.in_features, model.config().d_model);
}

TEST(LinearInputs, EveryLinearMatchesAnIndependentHook) {
  for (bool gpt2 : {false, true}) {
    SCOPED_TRACE(gpt2 ? "gpt2" : "llama");
    Transformer model = test::random_transformer(21, gpt2);
    std::vector<std::shared_ptr<CapturingLinear>> hooks;
    for (const auto& named : std::vector<NamedLinear>(model.linears())) {
      hooks.push_back(std::make_shared<CapturingLinear>(named.linear));
      model.replace_linear(named.name, hooks.back());
    }
    auto recorder = record_linear_inputs(model);  // outside the hooks: sees the same tensors
    // Two forward passes of different batch sizes: statistics run over all five sequences.
    model.forward(random_tokens(1, 2, 10));
    model.forward(random_tokens(2, 3, 10));
    const auto summaries = recorder->summary();
    ASSERT_EQ(summaries.size(), hooks.size());
    for (std::size_t i = 0; i < hooks.size(); ++i) {
      Expected e;
      for (const auto& input : hooks[i]->inputs) add_inputs(e, input);
      EXPECT_EQ(summaries[i].name, model.linears()[i].name);
      expect_summary(summaries[i], e, recorder->feature_max_abs(summaries[i].name));
    }
  }
}

TEST(LinearInputs, ResultsDoNotDependOnTheBatchSize) {
  Transformer base = test::random_transformer(4);
  at::Tensor tokens = random_tokens(9, 4, 16);
  Transformer one = base, all = base;
  auto r1 = record_linear_inputs(one);
  auto r4 = record_linear_inputs(all);
  for (std::int64_t b = 0; b < 4; ++b) one.forward(tokens.narrow(0, b, 1));
  all.forward(tokens);
  auto s1 = r1->summary(), s4 = r4->summary();
  ASSERT_EQ(s1.size(), s4.size());
  for (std::size_t i = 0; i < s1.size(); ++i) {
    SCOPED_TRACE(s1[i].name);
    EXPECT_EQ(s1[i].kurtosis_first, s4[i].kurtosis_first);
    EXPECT_EQ(s1[i].kurtosis_rest, s4[i].kurtosis_rest);
    EXPECT_EQ(s1[i].max_abs_first, s4[i].max_abs_first);
    EXPECT_EQ(s1[i].max_abs_rest, s4[i].max_abs_rest);
    EXPECT_EQ(s1[i].inf_over_l2_first, s4[i].inf_over_l2_first);
    EXPECT_EQ(s1[i].inf_over_l2_rest, s4[i].inf_over_l2_rest);
    EXPECT_EQ(s1[i].largest_value, s4[i].largest_value);
    EXPECT_EQ(s1[i].largest_sequence, s4[i].largest_sequence);
    EXPECT_TRUE(test::tensors_equal(s1[i].feature_max_abs, s4[i].feature_max_abs));
  }
}

TEST(LinearInputs, SingleTokenWindowsHaveNoRest) {
  Transformer model = test::random_transformer(4);
  auto recorder = record_linear_inputs(model, {"layers.1.mlp.down"});
  model.forward(random_tokens(1, 2, 1));
  LinearInputSummary s = recorder->summary("layers.1.mlp.down");
  EXPECT_EQ(s.sequences, 2);
  EXPECT_EQ(s.rest_sequences, 0);
  EXPECT_TRUE(std::isnan(s.kurtosis_rest));
  EXPECT_FALSE(std::isnan(s.kurtosis_first));
  EXPECT_EQ(s.in_features, model.config().d_ff);
  EXPECT_TRUE(s.to_json().at("kurtosis").at("rest").is_null());
}

TEST(LinearInputs, UnknownOrUnrunLinearsAreNamedInErrors) {
  Transformer model = test::random_transformer(4);
  EXPECT_TRUE(test::throws_with([&] { record_linear_inputs(model, {"layers.9.mlp.up"}); },
                                {"layers.9.mlp.up", "layers.0.attn.q"}));
  // Nothing was wrapped by the failed call.
  for (const auto& named : model.linears()) EXPECT_NE(dynamic_cast<const FloatLinear*>(named.linear.get()), nullptr);
  auto recorder = record_linear_inputs(model, {"layers.0.mlp.up", "layers.0.attn.o"});
  EXPECT_EQ(recorder->names(), (std::vector<std::string>{"layers.0.attn.o", "layers.0.mlp.up"}));  // execution order
  EXPECT_TRUE(test::throws_with([&] { recorder->feature_max_abs("layers.0.mlp.up"); }, {"layers.0.mlp.up", "no input"}));
  EXPECT_TRUE(test::throws_with([&] { recorder->feature_max_abs("layers.1.mlp.up"); }, {"layers.1.mlp.up", "not recorded"}));
  model.forward(random_tokens(1, 1, 5));
  EXPECT_EQ(recorder->feature_max_abs("layers.0.mlp.up").sizes(), at::IntArrayRef({model.config().d_model}));
  EXPECT_EQ(recorder->to_json().at("linears").size(), 2u);
  recorder->reset();
  EXPECT_TRUE(recorder->summary().empty());
}

}  // namespace
}  // namespace qeval
