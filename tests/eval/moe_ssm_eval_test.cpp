// Evaluation of mixture-of-experts and state-space models (issue 45): every plan gives the
// window-major bits on the HF fixtures read by parts (batch 2, so MoE routing and the scans run
// per sequence), the statistics summary has attention on attention layers only, Mamba-2's implicit
// attention and the router's load per expert, and every scheme's record says how many tokens each
// quantised expert saw.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "eval/evaluator.h"
#include "eval/schemes.h"
#include "eval/sensitivity.h"
#include "quant/schemes/presets.h"
#include "stats/statistics.h"
#include "loaders/checkpoints/model_reader.h"
#include "loaders/protocols/protocol.h"
#include "tests/support/plan_runs.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

// Four schemes with statistics over three documents, 16-token windows (tests/support/plan_runs.h).
test::PlanRun evaluate_fixture(ModelReader& reader, const EvalPlan& plan, std::int64_t batch) {
  return test::evaluate_over_plan(reader, plan, batch, {{"full", "int8-coarse", "int8-fine", "w4-zeropoint"}, 16, 3});
}

using test::plan_of;

class MoeSsmEval : public ::testing::TestWithParam<const char*> {};

TEST_P(MoeSsmEval, EveryPlanGivesTheWindowMajorBits) {
  auto reader = open_checkpoint(test::repo_path(std::string("tests/model/fixtures/") + GetParam()));
  const test::PlanRun base = evaluate_fixture(*reader, plan_of("resident", 0), 2);
  ASSERT_GE(base.result.windows, 4);
  for (const auto& [plan, batch] : {std::pair{plan_of("streamed", 2), std::int64_t{2}}, std::pair{plan_of("resident-weights", 3), std::int64_t{2}}}) {
    test::expect_same_bits(base, evaluate_fixture(*reader, plan, batch), plan.name);
  }
  // Batch 1 against batch 2: a sequence's numbers do not depend on its batch.
  test::expect_same_bits(base, evaluate_fixture(*reader, plan_of("resident", 0), 1), "batch 1");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeSsmEval,
                         ::testing::Values("tiny-jamba-hf", "tiny-mamba2-hf", "tiny-qwen2-moe-hf", "tiny-mamba-hf"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (auto& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

TEST(MoeSsmEval, StatisticsByLayerKindAndExpertTokenCounts) {
  auto jamba = open_checkpoint(test::repo_path("tests/model/fixtures/tiny-jamba-hf"));
  const test::PlanRun run = evaluate_fixture(*jamba, plan_of("resident", 0), 2);
  const nlohmann::json& st = run.statistics[0];
  EXPECT_EQ(st.at("attention").at("layers"), nlohmann::json({1, 3}));  // attn_layer_period 2, offset 1
  EXPECT_EQ(st.at("attention").at("entropy_per_layer").size(), 2u);
  // Its Mamba layers (0, 2) have the implicit attention of their scan and a selection entropy.
  EXPECT_EQ(st.at("implicit_attention").at("layers"), nlohmann::json({0, 2}));
  EXPECT_EQ(st.at("selection").at("layers"), nlohmann::json({0, 2}));
  for (const auto& h : st.at("selection").at("entropy_per_layer")) {
    EXPECT_GT(h.get<double>(), 0.0);
    EXPECT_LE(h.get<double>(), st.at("selection").at("entropy_max").get<double>() + 1e-12);
  }
  const nlohmann::json& router = st.at("router");
  EXPECT_EQ(router.at("layers"), nlohmann::json({0, 3}));  // expert_layer_period 3, offset 0
  const std::int64_t tokens = run.result.processed_tokens;
  for (const auto& counts : router.at("tokens_per_expert")) {
    std::int64_t total = 0;
    for (const auto& n : counts) total += n.get<std::int64_t>();
    EXPECT_EQ(total, 2 * tokens);  // top-2: every token makes two choices
  }
  for (const auto& h : router.at("load_entropy")) {
    EXPECT_GT(h.get<double>(), 0.0);
    EXPECT_LE(h.get<double>(), std::log(4.0) + 1e-12);
  }
  // Each quantised expert's record says how many tokens it saw; over a layer's experts they add up
  // to the router's choices.
  const nlohmann::json& layers = run.prepared.schemes[1].description.at("layers");
  std::int64_t layer0 = 0;
  for (const auto& l : layers)
    if (l.at("name").get<std::string>().rfind("layers.0.moe.experts.", 0) == 0 &&
        l.at("name").get<std::string>().find(".up") != std::string::npos)
      layer0 += l.at("tokens").get<std::int64_t>();
  EXPECT_EQ(layer0, 2 * tokens);
  // Router, conv, A, D and norms are not linears; x_proj / dt_proj stay full precision by default.
  for (const auto& l : layers) {
    const std::string name = l.at("name");
    const bool inner = name.find(".x_proj") != std::string::npos || name.find(".dt_proj") != std::string::npos;
    EXPECT_EQ(l.at("quantized").get<bool>(), !inner) << name;
  }

  auto mamba2 = open_checkpoint(test::repo_path("tests/model/fixtures/tiny-mamba2-hf"));
  const nlohmann::json m2 = evaluate_fixture(*mamba2, plan_of("resident", 0), 2).statistics[0];
  EXPECT_FALSE(m2.contains("attention"));
  EXPECT_FALSE(m2.contains("router"));
  const nlohmann::json& implicit = m2.at("implicit_attention");
  EXPECT_EQ(implicit.at("layers"), nlohmann::json({0, 1}));
  EXPECT_GT(implicit.at("entropy").get<double>(), 0.0);
  EXPECT_GE(implicit.at("first_attn_pct").get<double>(), 0.0);
  EXPECT_LE(implicit.at("first_attn_pct").get<double>(), 100.0);
}

// Sensitivity by kind takes every expert's projection of one kind as one unit.
TEST(MoeSsmEval, SensitivityKindsGroupTheExperts) {
  auto jamba = open_checkpoint(test::repo_path("tests/model/fixtures/tiny-jamba-hf"));
  const auto units = sensitivity_units(jamba->config(), preset_scheme("int8-moderate"), SensitivityGrouping::kind);
  std::map<std::string, std::size_t> sizes;
  for (const auto& u : units) sizes[u.name] = u.layers.size();
  EXPECT_EQ(sizes.at("moe.experts.*.up"), 8u);  // 2 MoE layers × 4 experts
  EXPECT_EQ(sizes.at("mamba.in_proj"), 2u);
  EXPECT_EQ(sizes.count("mamba.x_proj"), 0u);  // full precision unless quantize_ssm_inner
  EXPECT_EQ(sizes.at("attn.q"), 2u);
}

}  // namespace
}  // namespace qeval
