// State-space layers' statistics (issue 54, stats/implicit_attention.h): the blocked implicit
// attention against the materialised W of the same definition on random inputs (Mamba and Mamba-2,
// float32 and float64, lengths that do and do not fill the query blocks, blocks small enough that
// keys come in several pieces, decays steep enough for the direct path), the selection entropy by
// hand, and both against the numpy float64 oracle (tests/oracle/ssm_statistics_oracle.py) computed
// from its own forward of tiny-mamba-hf, tiny-mamba2-hf and tiny-jamba-hf.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/placement.h"
#include "model/ssm_scan.h"
#include "model/transformer.h"
#include "stats/implicit_attention.h"
#include "stats/statistics.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

// Equal within tol (relative above 1), or both NaN (no query i ≥ 2 when L = 1).
void expect_near_or_both_nan(double got, double want, double tol, const char* name) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << name << ": " << got << ", expected NaN";
    return;
  }
  EXPECT_NEAR(got, want, tol * std::max(1.0, std::abs(want))) << name;
}

void expect_same_stats(const std::vector<AttentionLayerStats>& got, const std::vector<AttentionLayerStats>& want,
                       double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t b = 0; b < got.size(); ++b) {
    SCOPED_TRACE(what + ", sequence " + std::to_string(b));
    expect_near_or_both_nan(got[b].first_attn, want[b].first_attn, tol, "first_attn");
    expect_near_or_both_nan(got[b].first_share, want[b].first_share, tol, "first_share");
    expect_near_or_both_nan(got[b].sink_fraction, want[b].sink_fraction, 1e-12, "sink_fraction");
    expect_near_or_both_nan(got[b].entropy, want[b].entropy, tol, "entropy");
  }
}

struct Mamba2Inputs {
  at::Tensor dt, A, B, C;
};

Mamba2Inputs mamba2_inputs(std::int64_t Bn, std::int64_t L, std::int64_t H, std::int64_t G, std::int64_t N,
                           at::ScalarType dtype, std::uint64_t seed) {
  at::manual_seed(seed);
  const auto o = at::TensorOptions().dtype(dtype);
  // Time steps and decays of a trained model's range: Δ in (0.001, 0.3), A in (−8, −0.5).
  return {at::softplus(at::randn({Bn, L, H}, o) - 3.0), -at::rand({H}, o) * 7.5 - 0.5, at::randn({Bn, L, G, N}, o),
          at::randn({Bn, L, G, N}, o)};
}

// Mamba-2's W written out in float64 (model/ssm_scan.h's ssd_implicit_attention returns float32).
at::Tensor mamba2_weights_float64(const Mamba2Inputs& in, std::int64_t H) {
  const at::Tensor dt = in.dt.to(at::kDouble), A = in.A.to(at::kDouble), B = in.B.to(at::kDouble),
                   C = in.C.to(at::kDouble);
  const std::int64_t Bn = dt.size(0), L = dt.size(1), G = B.size(2);
  const at::Tensor cum = (dt * A).cumsum(1);  // [B, L, H]
  const at::Tensor causal = at::ones({L, L}, at::kBool).tril();
  at::Tensor W = at::zeros({Bn, H, L, L}, at::kDouble);
  for (std::int64_t h = 0; h < H; ++h) {
    const std::int64_t g = h / (H / G);
    const at::Tensor scores = at::matmul(C.select(2, g), B.select(2, g).transpose(1, 2));  // [B, i, j]
    const at::Tensor c = cum.select(2, h);
    const at::Tensor decay = (c.unsqueeze(2) - c.unsqueeze(1)).clamp_max(0).exp().masked_fill(causal.logical_not(), 0);
    const at::Tensor m = (scores * decay * dt.select(2, h).unsqueeze(1)).abs();
    const at::Tensor total = m.sum(-1, /*keepdim=*/true);
    W.select(1, h).copy_(at::where(total > 0, m / total, at::zeros_like(m)));
  }
  return W;
}

TEST(ImplicitAttention, Mamba2BlockedEqualsTheMaterialisedDuality) {
  for (at::ScalarType dtype : {at::kDouble, at::kFloat})
    for (std::int64_t L : {1, 7, 64, 150})
      for (std::int64_t block : {0, 4096}) {  // 4096: keys before a query block come in pieces of 64
        const Mamba2Inputs in = mamba2_inputs(2, L, 4, 2, 8, dtype, 7 + L);
        const SsmSelection s{SsmSelection::Kind::mamba2, in.dt, in.A, in.B, in.C};
        for (std::int64_t sink_T : {4, 64}) {
          const std::string what = "Mamba-2, " + std::string(c10::toString(dtype)) + ", L " + std::to_string(L) +
                                   ", block " + std::to_string(block) + ", T " + std::to_string(sink_T);
          expect_same_stats(implicit_attention_stats(s, sink_T, 0.3, block),
                            attention_layer_stats(mamba2_weights_float64(in, 4), sink_T, 0.3),
                            dtype == at::kDouble ? 1e-12 : 2e-6, what);
          if (dtype == at::kFloat)  // and model/ssm_scan.h's float32 W of the evaluation before issue 54
            expect_same_stats(implicit_attention_stats(s, sink_T, 0.3, block),
                              attention_layer_stats(ssd_implicit_attention(in.dt, in.A, in.B, in.C, 4), sink_T, 0.3),
                              2e-6, what + ", ssd_implicit_attention");
        }
      }
}

struct MambaInputs {
  at::Tensor delta, A, B, C;
};

MambaInputs mamba_inputs(std::int64_t Bn, std::int64_t L, std::int64_t E, std::int64_t N, at::ScalarType dtype,
                         std::uint64_t seed) {
  at::manual_seed(seed);
  const auto o = at::TensorOptions().dtype(dtype);
  // A as HF initialises it (−1..−N per channel), scaled per channel so some channels forget fast.
  const at::Tensor A = -at::arange(1, N + 1, o).unsqueeze(0) * (at::rand({E, 1}, o) * 3.0 + 0.2);
  return {at::softplus(at::randn({Bn, L, E}, o) - 2.0), A, at::randn({Bn, L, N}, o), at::randn({Bn, L, N}, o)};
}

// A sink (key 1's B fifty times the others: key 1 holds most rows' maximum, so every row's maximum
// runs over the earlier keys) and rows of zeros (C_i = 0: every key ties at 0).
TEST(ImplicitAttention, Mamba2SinksAndZeroRowsEqualTheMaterialisedDuality) {
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    Mamba2Inputs in = mamba2_inputs(2, 150, 4, 2, 8, dtype, 99);
    in.B.select(1, 0).mul_(50.0);
    in.A.fill_(-0.01);  // slow decay: key 1 stays within reach
    in.C.select(1, 5).zero_();
    in.C.select(1, 100).zero_();
    const SsmSelection s{SsmSelection::Kind::mamba2, in.dt, in.A, in.B, in.C};
    const std::vector<AttentionLayerStats> want = attention_layer_stats(mamba2_weights_float64(in, 4), 8, 0.3);
    EXPECT_GT(want[0].first_attn, 0.5);  // the sink is there
    for (std::int64_t block : {0, 4096})  // 4096: the earlier keys in pieces of 64
      expect_same_stats(implicit_attention_stats(s, 8, 0.3, block), want, dtype == at::kDouble ? 1e-12 : 2e-6,
                        std::string("sink, ") + c10::toString(dtype) + ", block " + std::to_string(block));
  }
}

TEST(ImplicitAttention, MambaBlockedEqualsTheMaterialisedHiddenAttention) {
  for (at::ScalarType dtype : {at::kDouble, at::kFloat})
    for (std::int64_t L : {1, 9, 64, 150})
      for (std::int64_t block : {0, 1 << 15}) {  // 2^15: channels in blocks of 2
        const MambaInputs in = mamba_inputs(2, L, 6, 4, dtype, 11 + L);
        const SsmSelection s{SsmSelection::Kind::mamba, in.delta, in.A, in.B, in.C};
        const at::Tensor W = selective_scan_implicit_attention(in.delta, in.A, in.B, in.C);
        const std::string what = "Mamba, " + std::string(c10::toString(dtype)) + ", L " + std::to_string(L) +
                                 ", block " + std::to_string(block);
        expect_same_stats(implicit_attention_stats(s, 4, 0.3, block), attention_layer_stats(W, 4, 0.3),
                          dtype == at::kDouble ? 1e-12 : 2e-6, what);
      }
}

// A channel whose decay across a query block exceeds the factorised range (|A| Σ Δ > 300 in
// float64, 40 in float32) goes the direct way; its statistics are the same.
TEST(ImplicitAttention, MambaSteepDecaysTakeTheDirectPathWithTheSameResult) {
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    MambaInputs in = mamba_inputs(1, 130, 4, 4, dtype, 5);
    in.A[0].fill_(-400.0);      // every position forgets almost everything: W is nearly the diagonal
    in.A[2].mul_(30.0);         // steep, but earlier keys still matter within a few positions
    in.delta.select(2, 2).fill_(0.4);
    const SsmSelection s{SsmSelection::Kind::mamba, in.delta, in.A, in.B, in.C};
    const at::Tensor W = selective_scan_implicit_attention(in.delta, in.A, in.B, in.C);
    expect_same_stats(implicit_attention_stats(s, 4, 0.3), attention_layer_stats(W, 4, 0.3),
                      dtype == at::kDouble ? 1e-12 : 2e-6, std::string("steep, ") + c10::toString(dtype));
  }
}

// Each sequence is measured alone: its statistics do not depend on what else is in the batch.
TEST(ImplicitAttention, ASequenceDoesNotDependOnItsBatch) {
  const Mamba2Inputs in = mamba2_inputs(3, 80, 4, 1, 8, at::kFloat, 3);
  const SsmSelection all{SsmSelection::Kind::mamba2, in.dt, in.A, in.B, in.C};
  const at::Tensor together = implicit_attention_sums(all, 8);
  const SsmSelection one{SsmSelection::Kind::mamba2, in.dt.narrow(0, 1, 1), in.A, in.B.narrow(0, 1, 1),
                         in.C.narrow(0, 1, 1)};
  EXPECT_TRUE(implicit_attention_sums(one, 8)[0].equal(together[1]));
}

TEST(SelectionEntropy, ConstantTimeStepsGiveLogLAndOneSpikeGivesLess) {
  const at::Tensor constant = at::full({1, 50, 3}, 0.2, at::kDouble);
  EXPECT_NEAR(selection_entropy(constant)[0], std::log(50.0), 1e-12);
  // One channel spends all its step on one position (entropy 0), the other two are uniform.
  at::Tensor spike = constant.clone();
  spike.select(2, 0).fill_(0.0);
  spike[0][7][0] = 1.0;
  EXPECT_NEAR(selection_entropy(spike)[0], 2.0 / 3.0 * std::log(50.0), 1e-12);
  // Two halves, one with 3 times the step of the other: −Σ S log S by hand.
  at::Tensor halves = at::ones({1, 4, 1}, at::kDouble);
  halves[0][0][0] = 3.0;
  halves[0][1][0] = 3.0;
  const double hi = 3.0 / 8.0, lo = 1.0 / 8.0;
  EXPECT_NEAR(selection_entropy(halves)[0], -2 * hi * std::log(hi) - 2 * lo * std::log(lo), 1e-12);
}

// --mamba-channels K: a Mamba layer's implicit attention on channels ⌊k E / K⌋ only, as if the layer
// had those channels; the selection entropy still over all of them.
TEST(ImplicitAttention, MambaChannelSubsetMeasuresThoseChannels) {
  const MambaInputs in = mamba_inputs(1, 40, 12, 4, at::kDouble, 21);
  StatisticsOptions options;
  options.sink_T = 4;
  options.layer_mixers = {MixerKind::mamba};
  options.mamba_channels = 5;
  StatisticsCollector collector(options);
  collector.begin_batch({0});
  collector.on_ssm_selection(0, {SsmSelection::Kind::mamba, in.delta, in.A, in.B, in.C});
  collector.on_block_output(0, at::randn({1, 40, 8}, at::kDouble));
  const nlohmann::json summary = collector.summary();
  const at::Tensor picked = at::tensor(std::vector<std::int64_t>{0, 2, 4, 7, 9});  // ⌊k · 12 / 5⌋
  const std::vector<AttentionLayerStats> want = implicit_attention_stats(
      {SsmSelection::Kind::mamba, in.delta.index_select(2, picked), in.A.index_select(0, picked), in.B, in.C}, 4, 0.3);
  const nlohmann::json& implicit = summary.at("implicit_attention");
  EXPECT_NEAR(implicit.at("entropy").get<double>(), want[0].entropy, 1e-12);
  EXPECT_NEAR(implicit.at("first_token_share").get<double>(), want[0].first_share, 1e-12);
  EXPECT_NEAR(implicit.at("sink_rate_pct").get<double>(), 100 * want[0].sink_fraction, 1e-12);
  EXPECT_TRUE(implicit.contains("mamba_channels"));
  EXPECT_NEAR(summary.at("selection").at("entropy").get<double>(), selection_entropy(in.delta)[0], 1e-12);
}

// The numpy float64 oracle's values, from its own forward of each fixture, against qeval's forward
// in float64 with the statistics collector (sink T 4, ε 0.3, as the oracle).
class SsmStatisticsOracle : public ::testing::TestWithParam<const char*> {};

TEST_P(SsmStatisticsOracle, EqualsTheFloat64OracleToOneInAMillion) {
  const auto dir = test::repo_path(std::string("tests/model/fixtures/") + GetParam());
  nlohmann::json ref;
  std::ifstream(dir / "statistics_reference.json") >> ref;
  const auto reference = read_safetensors(dir / "reference.safetensors");
  LoadedCheckpoint ckpt = load_checkpoint(dir);
  PlacementCache cache({at::Device(at::kCPU), at::kDouble});
  const Transformer model = Transformer(ckpt.config, ckpt.weights, dir.string()).placed(cache);
  StatisticsOptions options;
  options.sink_T = ref.at("sink_T").get<std::int64_t>();
  options.sink_eps = ref.at("sink_eps").get<double>();
  options.layer_mixers = ckpt.config.layer_mixers;
  options.layer_ffns = ckpt.config.layer_ffns;
  options.experts = ckpt.config.moe_experts;
  StatisticsCollector collector(options);
  collector.begin_batch({0, 1});
  model.forward(reference.at("input_ids"), &collector);
  const nlohmann::json summary = collector.summary();
  const nlohmann::json& implicit = summary.at("implicit_attention");
  const nlohmann::json& selection = summary.at("selection");
  EXPECT_EQ(implicit.at("layers"), ref.at("layers"));
  EXPECT_EQ(selection.at("layers"), ref.at("layers"));
  const nlohmann::json& want = ref.at("per_layer");
  auto close = [](double got, double expected) { return std::abs(got - expected) <= 1e-6 * std::max(std::abs(expected), 1e-3); };
  double worst = 0;
  for (std::size_t m = 0; m < ref.at("layers").size(); ++m) {
    const std::vector<std::pair<double, double>> pairs = {
        {implicit.at("per_layer").at("first_attn_pct")[m].get<double>() / 100, want.at("first_attn")[m].get<double>()},
        {implicit.at("per_layer").at("first_token_share")[m].get<double>(), want.at("first_share")[m].get<double>()},
        {implicit.at("per_layer").at("sink_rate_pct")[m].get<double>() / 100, want.at("sink_fraction")[m].get<double>()},
        {implicit.at("entropy_per_layer")[m].get<double>(), want.at("entropy")[m].get<double>()},
        {selection.at("entropy_per_layer")[m].get<double>(), want.at("selection_entropy")[m].get<double>()}};
    for (std::size_t k = 0; k < pairs.size(); ++k) {
      EXPECT_TRUE(close(pairs[k].first, pairs[k].second))
          << GetParam() << " layer " << ref.at("layers")[m] << " value " << k << ": " << pairs[k].first << " vs "
          << pairs[k].second;
      if (pairs[k].second != 0) worst = std::max(worst, std::abs(pairs[k].first / pairs[k].second - 1));
    }
  }
  std::cout << GetParam() << ": largest relative difference from the oracle " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SsmStatisticsOracle,
                         ::testing::Values("tiny-mamba-hf", "tiny-mamba2-hf", "tiny-jamba-hf"));

}  // namespace
}  // namespace qeval
