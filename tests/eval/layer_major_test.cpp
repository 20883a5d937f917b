// Layer-major evaluation (DESIGN.md §11): every plan gives the window-major result bit for bit
// (rows, statistics, per-token values), from a checkpoint read by parts or from memory; the
// vocabulary-blocked scoring agrees with a float64 log-softmax; the memory planner picks the
// fastest plan that fits and refuses with numbers when none does; non-finite weights and
// activations never yield a number.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <limits>

#include <cmath>

#include "common/error.h"
#include "eval/evaluator.h"
#include "eval/memory_plan.h"
#include "eval/schemes.h"
#include "quant/schemes/presets.h"
#include "stats/statistics.h"
#include "eval/vocab_scoring.h"
#include "loaders/checkpoints/model_reader.h"
#include "loaders/checkpoints/qeval_checkpoint.h"
#include "loaders/protocols/protocol.h"
#include "tests/support/plan_runs.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

// --- vocabulary-blocked scoring -------------------------------------------------------------

// The float64 reference: log-softmax over the whole vocabulary.
struct Reference {
  at::Tensor nll, kl, rkl, dp, agree, right;  // [B, P]
};
Reference reference(const at::Tensor& logits, const at::Tensor& full_logits, const at::Tensor& targets) {
  const std::int64_t P = logits.size(1) - 1;
  at::Tensor lp = at::log_softmax(logits.narrow(1, 0, P).to(at::kDouble), -1);
  at::Tensor lf = at::log_softmax(full_logits.narrow(1, 0, P).to(at::kDouble), -1);
  at::Tensor next = targets.narrow(1, 1, P).unsqueeze(-1);
  Reference r;
  r.nll = -lp.gather(-1, next).squeeze(-1);
  const at::Tensor nll_f = -lf.gather(-1, next).squeeze(-1);
  r.kl = (lf.exp() * (lf - lp)).sum(-1);
  r.rkl = (lp.exp() * (lp - lf)).sum(-1);
  r.right = lp.argmax(-1).eq(next.squeeze(-1)).to(at::kLong);
  r.dp = (-r.nll).exp() - (-nll_f).exp();
  r.agree = lp.argmax(-1).eq(lf.argmax(-1)).to(at::kLong);
  return r;
}

std::vector<TokenValues> score_in_blocks(const std::vector<at::Tensor>& logits, const at::Tensor& targets, std::int64_t block) {
  VocabScorer scorer(targets, logits.size());
  const std::int64_t V = logits[0].size(2), P = logits[0].size(1) - 1;
  for (std::int64_t begin = 0; begin < V; begin += block)
    for (std::int64_t p0 = 0; p0 < P; p0 += 2) {  // spans of two positions, the last one shorter
      const std::int64_t n = std::min(block, V - begin), np = std::min<std::int64_t>(2, P - p0);
      for (std::size_t s = 0; s < logits.size(); ++s) scorer.add(s, begin, p0, logits[s].narrow(1, p0, np).narrow(2, begin, n));
      scorer.end_block();
    }
  return scorer.finish();
}

TEST(VocabScorer, BlockedScoresMatchAFloat64LogSoftmax) {
  at::manual_seed(3);
  const std::int64_t B = 2, L = 6, V = 2 * kVocabBlock + 37;
  const at::Tensor full = 4 * at::randn({B, L, V});
  const at::Tensor near = full + 0.05 * at::randn({B, L, V});
  const at::Tensor far = full + 2.0 * at::randn({B, L, V});
  const at::Tensor targets = at::randint(V, {B, L}, at::kLong);
  const auto values = score_in_blocks({full, near, far}, targets, kVocabBlock);
  for (std::size_t s = 0; s < 3; ++s) {
    const at::Tensor& logits = s == 0 ? full : s == 1 ? near : far;
    const Reference r = reference(logits, full, targets);
    EXPECT_TRUE(test::tensors_close(values[s].nll, r.nll, 2e-6, 1e-6)) << "scheme " << s;
    EXPECT_TRUE(test::tensors_close(values[s].kl, s == 0 ? at::zeros_like(r.kl) : r.kl, 2e-6, 1e-5)) << "scheme " << s;
    EXPECT_TRUE(test::tensors_close(values[s].rkl, s == 0 ? at::zeros_like(r.rkl) : r.rkl, 2e-6, 1e-5)) << "scheme " << s;
    EXPECT_TRUE(test::tensors_equal(values[s].right, r.right)) << "scheme " << s;
    EXPECT_TRUE(test::tensors_close(values[s].dp, s == 0 ? at::zeros_like(r.dp) : r.dp, 1e-7)) << "scheme " << s;
    EXPECT_TRUE(test::tensors_equal(values[s].agree, r.agree)) << "scheme " << s;
  }
  // The near scheme's KL is small and positive: no cancellation took it below zero.
  EXPECT_GT(values[1].kl.min().item<double>(), 0.0);
  EXPECT_GT(values[1].rkl.min().item<double>(), 0.0);
}

TEST(VocabScorer, TiesGoToTheLowestIndexAcrossBlocks) {
  const std::int64_t V = kVocabBlock + 10;
  at::Tensor full = at::zeros({1, 2, V});
  full[0][0][3] = 5;
  full[0][0][kVocabBlock + 2] = 5;  // the same maximum in a later block
  at::Tensor other = at::zeros({1, 2, V});
  other[0][0][kVocabBlock + 2] = 5;
  const at::Tensor targets = at::zeros({1, 2}, at::kLong);
  const auto values = score_in_blocks({full, other}, targets, kVocabBlock);
  EXPECT_EQ(values[1].agree[0][0].item<std::int64_t>(), 0);  // full's argmax is 3, the other's kVocabBlock + 2
}

TEST(VocabScorer, HandComputedNllKlAndAgreement) {
  // One window of 3 positions over a vocabulary of 2; targets [x, 0, 1] (as the old score_batch test).
  at::Tensor full = at::log(at::tensor({0.5, 0.5, 0.9, 0.1, 0.2, 0.8}, at::kFloat)).reshape({1, 3, 2});
  at::Tensor q = at::log(at::tensor({0.5, 0.5, 0.6, 0.4, 0.7, 0.3}, at::kFloat)).reshape({1, 3, 2});
  at::Tensor targets = at::tensor({0, 0, 1}, at::kLong).reshape({1, 3});
  const auto values = score_in_blocks({full, q}, targets, kVocabBlock);
  auto rows = window_rows(values[1], values[0], {1});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].tokens, 2);
  EXPECT_NEAR(rows[0].nll_sum, -std::log(0.5) - std::log(0.4), 1e-6);
  EXPECT_NEAR(rows[0].diff_sum, (-std::log(0.5) + std::log(0.5)) + (-std::log(0.4) + std::log(0.1)), 1e-6);
  EXPECT_NEAR(rows[0].kl_sum, 0.9 * std::log(0.9 / 0.6) + 0.1 * std::log(0.1 / 0.4), 1e-6);
  EXPECT_EQ(rows[0].top1_agree, 2);  // position 0 ties at index 0 in both; position 1: 0 vs 0
  EXPECT_NEAR(rows[0].dp_sum, (0.5 - 0.5) + (0.4 - 0.1), 1e-6);
  // The tails: reverse KL at position 1, Δp² and Δp⁴, the flips, the position buckets.
  EXPECT_NEAR(rows[0].rkl_sum, 0.6 * std::log(0.6 / 0.9) + 0.4 * std::log(0.4 / 0.1), 1e-6);
  EXPECT_NEAR(rows[0].dp_sq_sum, 0.3 * 0.3, 1e-6);
  EXPECT_NEAR(rows[0].dp_4_sum, 0.3 * 0.3 * 0.3 * 0.3, 1e-6);
  // Position 0 (target 0): both tie at 0.5 and pick index 0, both right; position 1 (target 1):
  // both pick 0 (0.9, 0.6), both wrong. No flip either way.
  EXPECT_EQ(rows[0].top1_lost, 0);
  EXPECT_EQ(rows[0].top1_gained, 0);
  EXPECT_EQ(values[0].right[0][0].item<std::int64_t>(), 1);
  EXPECT_EQ(values[1].right[0][1].item<std::int64_t>(), 0);
  ASSERT_EQ(rows[0].buckets.size(), 2u);  // predictions 0 and 1
  EXPECT_EQ(rows[0].buckets[0].tokens, 1);
  EXPECT_EQ(rows[0].buckets[1].tokens, 1);
  EXPECT_NEAR(rows[0].buckets[1].diff_sum, -std::log(0.4) + std::log(0.1), 1e-6);
  EXPECT_NEAR(rows[0].buckets[0].kl_sum, 0.0, 1e-6);
  const auto self = window_rows(values[0], values[0], {1});
  EXPECT_EQ(self[0].top1_agree, self[0].tokens);
  EXPECT_EQ(self[0].kl_sum, 0.0);
}

TEST(VocabScorer, TopOneFlipsBothWays) {
  // Position 0 predicts target 0: full picks 0 (right), q picks 1 (wrong): lost. Position 1 predicts
  // target 1: full picks 0 (wrong), q picks 1 (right): gained. Position 2 predicts 0: both pick 0.
  at::Tensor full = at::tensor({2.f, 0.f, 2.f, 0.f, 2.f, 0.f, 0.f, 0.f}).reshape({1, 4, 2});
  at::Tensor q = at::tensor({0.f, 2.f, 0.f, 2.f, 2.f, 0.f, 0.f, 0.f}).reshape({1, 4, 2});
  at::Tensor targets = at::tensor({0, 0, 1, 0}, at::kLong).reshape({1, 4});
  const auto values = score_in_blocks({full, q}, targets, kVocabBlock);
  const auto rows = window_rows(values[1], values[0], {1});
  EXPECT_EQ(rows[0].top1_lost, 1);
  EXPECT_EQ(rows[0].top1_gained, 1);
  EXPECT_EQ(rows[0].top1_agree, 1);
  ASSERT_EQ(rows[0].buckets.size(), 3u);  // predictions 0, 1, 2–3
  EXPECT_EQ(rows[0].buckets[2].tokens, 1);
}

// The row kernels (the CPU's path) and LibTorch's ops (the GPU's) agree to float64 rounding, and
// the row kernels' values do not depend on the thread count.
TEST(VocabScorer, RowKernelsAgreeWithLibTorchOpsAndIgnoreTheThreadCount) {
  at::manual_seed(5);
  const std::int64_t B = 2, L = 9, V = kVocabBlock + 1003;
  const at::Tensor full = 4 * at::randn({B, L, V});
  const at::Tensor q = full + 0.3 * at::randn({B, L, V});
  const at::Tensor targets = at::randint(V, {B, L}, at::kLong);
  auto score = [&](VocabScorer::Path path) {
    VocabScorer scorer(targets, 2, path);
    for (std::int64_t begin = 0; begin < V; begin += kVocabBlock) {
      const std::int64_t n = std::min(kVocabBlock, V - begin);
      for (std::int64_t p0 = 0; p0 < L - 1; p0 += 3) {
        const std::int64_t np = std::min<std::int64_t>(3, L - 1 - p0);
        scorer.add(0, begin, p0, full.narrow(1, p0, np).narrow(2, begin, n));
        scorer.add(1, begin, p0, q.narrow(1, p0, np).narrow(2, begin, n));
        scorer.end_block();
      }
    }
    return scorer.finish();
  };
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = score(VocabScorer::Path::automatic);
  at::set_num_threads(2);
  const auto two = score(VocabScorer::Path::automatic);
  at::set_num_threads(threads);
  const auto aten = score(VocabScorer::Path::aten);
  for (std::size_t s = 0; s < 2; ++s) {
    for (auto member : {&TokenValues::nll, &TokenValues::kl, &TokenValues::rkl, &TokenValues::dp, &TokenValues::agree,
                        &TokenValues::right})
      EXPECT_TRUE(test::tensors_equal(one[s].*member, two[s].*member)) << "scheme " << s;
    EXPECT_TRUE(test::tensors_close(one[s].rkl, aten[s].rkl, 1e-5, 1e-6)) << "scheme " << s;
    EXPECT_TRUE(test::tensors_equal(one[s].right, aten[s].right)) << "scheme " << s;
    EXPECT_TRUE(test::tensors_close(one[s].nll, aten[s].nll, 1e-6, 1e-6)) << "scheme " << s;
    EXPECT_TRUE(test::tensors_close(one[s].kl, aten[s].kl, 1e-5, 1e-6)) << "scheme " << s;
    EXPECT_TRUE(test::tensors_close(one[s].dp, aten[s].dp, 1e-6, 1e-7)) << "scheme " << s;
    EXPECT_TRUE(test::tensors_equal(one[s].agree, aten[s].agree)) << "scheme " << s;
  }
}

// --- every plan gives the same bits -----------------------------------------------------------

// The random model's vocabulary spans two vocabulary blocks, so the head runs in blocks.
constexpr std::int64_t kVocab = kVocabBlock + 300;

// Five schemes with statistics over five pangram documents, 24-token windows (tests/support/plan_runs.h).
test::PlanRun evaluate_with(ModelReader& reader, const EvalPlan& plan, std::int64_t batch) {
  return test::evaluate_over_plan(reader, plan, batch);
}

using test::expect_same_bits;
using test::plan_of;

TEST(LayerMajor, EveryPlanAndChunkGivesTheWindowMajorBits) {
  for (bool gpt2 : {false, true}) {
    SCOPED_TRACE(gpt2 ? "gpt2-style" : "llama-style");
    const Transformer model = test::random_transformer(11, gpt2, kVocab, 32, 3);
    test::TempDir dir;
    save_qeval_checkpoint(dir.path(), model.config(), model.weights());
    std::unique_ptr<ModelReader> file = open_checkpoint(dir.path());  // read by offset, part by part
    std::unique_ptr<ModelReader> memory = transformer_reader(model);
    const test::PlanRun baseline = evaluate_with(*memory, plan_of("resident", 0), 1);
    ASSERT_GT(baseline.result.windows, 4);
    expect_same_bits(baseline, evaluate_with(*file, plan_of("resident", 0), 1), "resident from the file");
    expect_same_bits(baseline, evaluate_with(*file, plan_of("streamed", 2), 2), "streamed, chunks of 2, batch 2");
    expect_same_bits(baseline, evaluate_with(*file, plan_of("streamed", 100), 1), "streamed, one chunk");
    expect_same_bits(baseline, evaluate_with(*memory, plan_of("resident-weights", 3), 1), "resident-weights, chunks of 3");
    EvalPlan prefetching = plan_of("streamed", 4);
    prefetching.prefetch_next_layer = true;  // what GPU plans do: the next layer read and rewritten on another thread
    expect_same_bits(baseline, evaluate_with(*file, prefetching, 2), "streamed with the next layer prefetched");
  }
}

TEST(LayerMajor, ReaderPartsEqualTheWholeLoad) {
  const Transformer model = test::random_transformer(12, false, 300, 32, 2);
  test::TempDir dir;
  save_qeval_checkpoint(dir.path(), model.config(), model.weights());
  std::unique_ptr<ModelReader> reader = open_checkpoint(dir.path());
  const LoadedCheckpoint whole = load_checkpoint(dir.path());
  const at::Tensor ids = at::tensor({5, 299, 5, 0, 17}, at::kLong);
  EXPECT_TRUE(test::tensors_equal(reader->token_embedding_rows(ids), whole.weights.token_embedding.index_select(0, ids)));
  EXPECT_TRUE(test::tensors_equal(reader->lm_head_rows(100, 50), whole.weights.lm_head.narrow(0, 100, 50)));
  const BlockWeights b = reader->block(1);
  EXPECT_TRUE(test::tensors_equal(b.down.weight, whole.weights.blocks[1].down.weight));
  EXPECT_TRUE(test::tensors_equal(b.attn_norm.weight, whole.weights.blocks[1].attn_norm.weight));
  const PartSizes& sizes = reader->part_sizes();
  ASSERT_EQ(sizes.blocks.size(), 2u);
  const std::int64_t D = 32, F = 96, kv = 2 * 8;
  EXPECT_EQ(sizes.blocks[0], (2 * D + D * D + 2 * kv * D + D * D + 3 * F * D) * 4);
  EXPECT_EQ(sizes.token_embedding, 300 * D * 4);
  EXPECT_EQ(sizes.lm_head, 300 * D * 4);
}

// --- the memory planner -------------------------------------------------------------------------

PlanInputs plan_inputs_for(const ModelConfig& config, const PartSizes& parts, std::size_t quantised_schemes) {
  PlanInputs in;
  in.config = config;
  in.parts = parts;
  in.schemes.push_back(std::nullopt);
  for (std::size_t i = 0; i < quantised_schemes; ++i) in.schemes.push_back(preset_scheme("int8-moderate"));
  in.attention_statistics.assign(in.schemes.size(), false);
  in.batch_size = 1;
  in.seq_len = 128;
  in.windows = 16;
  return in;
}

TEST(MemoryPlan, TakesTheFastestPlanThatFitsAndRefusesWithNumbers) {
  const Transformer model = test::random_transformer(13, false, 300, 64, 4);
  std::unique_ptr<ModelReader> reader = transformer_reader(model);
  PlanInputs in = plan_inputs_for(model.config(), reader->part_sizes(), 6);
  const std::vector<PlanEstimate> plans = estimate_plans(in, {1ll << 40, "test", 0, ""});
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_GT(plans[0].host_bytes, plans[2].host_bytes - plans[2].breakdown.at("per_window").get<std::int64_t>() * plans[2].plan.chunk_windows);
  MemoryBudget roomy{1ll << 40, "test", 0, ""};
  EXPECT_EQ(choose_plan(in, roomy).plan.name, "resident");
  // Just below the resident plan's need: a plan that rebuilds the schemes per chunk.
  MemoryBudget tight{plans[0].host_bytes - 1, "test cap", 0, ""};
  const PlanEstimate chosen = choose_plan(in, tight);
  EXPECT_NE(chosen.plan.name, "resident");
  EXPECT_LE(chosen.host_bytes, tight.host);
  MemoryBudget tiny{1 << 20, "test cap", 0, ""};
  EXPECT_TRUE(test::throws_with([&] { choose_plan(in, tiny); },
                                {"no evaluation plan fits", "1.00 MiB available (test cap)", "streamed needs", "no weight was read"}));
  EXPECT_TRUE(test::throws_with([&] { choose_plan(in, tight, "resident"); }, {"--plan resident", "test cap"}));
  // More schemes need more memory resident, but not streamed beyond one layer's worth.
  PlanInputs more = plan_inputs_for(model.config(), reader->part_sizes(), 12);
  const auto plans_more = estimate_plans(more, roomy);
  EXPECT_GT(plans_more[0].host_bytes, plans[0].host_bytes);
}

// A scheme that sets quantize_lm_head but whose include list leaves the head out (every unit of
// `sensitivity --by layer` on a gguf-* preset) holds no quantised head and no per-window logits
// of its own: the planner counts what the rewrite does, not the flag (it asked 28 GiB for
// SmolLM2's 210 units of gguf-q4_k_m).
TEST(MemoryPlan, AHeadTheIncludeListLeavesOutIsNotCounted) {
  const Transformer model = test::random_transformer(13, false, 300, 64, 4);
  std::unique_ptr<ModelReader> reader = transformer_reader(model);
  const MemoryBudget roomy{1ll << 40, "test", 0, ""};
  auto streamed_bytes = [&](const SchemeSpec& spec) {
    PlanInputs in = plan_inputs_for(model.config(), reader->part_sizes(), 0);
    for (int i = 0; i < 8; ++i) in.schemes.push_back(spec);
    in.attention_statistics.assign(in.schemes.size(), false);
    return choose_plan(in, roomy, "streamed").host_bytes;
  };
  SchemeSpec unit = preset_scheme("gguf-q4_k_m");
  ASSERT_TRUE(unit.quantize_lm_head);
  unit.include = {"layers.0.attn.q"};
  SchemeSpec no_head = unit;
  no_head.quantize_lm_head = false;
  EXPECT_EQ(streamed_bytes(unit), streamed_bytes(no_head));
  EXPECT_GT(streamed_bytes(preset_scheme("gguf-q4_k_m")), streamed_bytes(unit));
}

// Issue 63: sizes whose product passes 64 bits saturate instead of wrapping to a negative estimate
// that "fits" every budget, and a forced chunk holds no more windows than the run has.
TEST(MemoryPlan, EstimatesPast64BitsSaturateAndNeverFit) {
  const Transformer model = test::random_transformer(13, false, 300, 64, 4);
  std::unique_ptr<ModelReader> reader = transformer_reader(model);
  PlanInputs in = plan_inputs_for(model.config(), reader->part_sizes(), 2);
  in.attention_statistics.assign(in.schemes.size(), true);
  in.config.n_heads = 1 << 12;  // attention probabilities: 2·B·H·L²·4 bytes = 2^65
  in.config.n_kv_heads = 1 << 12;
  in.batch_size = 1 << 16;
  in.seq_len = 1 << 20;
  const MemoryBudget roomy{1ll << 40, "test", 0, ""};
  for (const PlanEstimate& e : estimate_plans(in, roomy)) {
    SCOPED_TRACE(e.plan.name);
    EXPECT_FALSE(e.fits);
    EXPECT_EQ(e.host_bytes, std::numeric_limits<std::int64_t>::max());
  }
  EXPECT_TRUE(test::throws_with([&] { choose_plan(in, roomy); }, {"no evaluation plan fits", "more than 8 EiB"}));

  PlanInputs few = plan_inputs_for(model.config(), reader->part_sizes(), 2);
  few.windows = 3;
  const PlanEstimate forced = choose_plan(few, roomy, "streamed", 4'000'000'000'000'000'000);
  EXPECT_EQ(forced.plan.chunk_windows, 3);
  EXPECT_GT(forced.host_bytes, 0);
  EXPECT_TRUE(forced.fits);
}

// --- non-finite input yields no number ---------------------------------------------------------

TEST(LayerMajor, NonFiniteWeightsAndActivationsAreRefusedByName) {
  Transformer model = test::random_transformer(14, false, 64, 32, 2);
  ModelWeights bad = model.weights();
  bad.blocks[1].up.weight = bad.blocks[1].up.weight.clone();
  bad.blocks[1].up.weight[3][7] = std::numeric_limits<float>::quiet_NaN();
  const Transformer nan_model(model.config(), bad, "nan model");
  EXPECT_TRUE(test::throws_with([&] { evaluate_with(*transformer_reader(nan_model), plan_of("resident", 0), 1); },
                                {"layers.1.mlp.up.weight", "non-finite", "[3, 7]"}));
  // An embedding row is read only when a batch uses it: the table's index names the token ('q' of
  // "quick" in the first document is byte 113, token 3 + 113 % 61 = 55).
  ModelWeights bad_row = model.weights();
  bad_row.token_embedding = bad_row.token_embedding.clone();
  bad_row.token_embedding[55][9] = std::numeric_limits<float>::infinity();
  const Transformer inf_row(model.config(), bad_row, "inf row model");
  EXPECT_TRUE(test::throws_with([&] { evaluate_with(*transformer_reader(inf_row), plan_of("streamed", 2), 1); },
                                {"token_embedding", "non-finite value: inf", "[55, 9]", "token 55"}));
  // Finite weights whose activations overflow: the scheme, the window and the first layer are named.
  ModelWeights huge = model.weights();
  huge.blocks[0].down.weight = at::full_like(huge.blocks[0].down.weight, 3e38f);  // finite, but its products are not
  const Transformer overflow(model.config(), huge, "overflowing model");
  EXPECT_TRUE(test::throws_with([&] { evaluate_with(*transformer_reader(overflow), plan_of("resident", 0), 1); },
                                {"scheme full", "window 0", "NLL is not finite", "output of layer 0"}));
}

}  // namespace
}  // namespace qeval
