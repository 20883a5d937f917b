// `qeval eval --compare-checkpoint` (issue 78 item 2): an artifact made from --model is a row of
// the parent's record, named by its folder and method, beside the parent's presets; the record
// describes it (path, format, bytes per weight, the weight error of every tensor) and verifies;
// `compare` shows its row; the row's NLL is the artifact's own evaluation (`eval --model
// ARTIFACT` alone gives the same perplexity); bad uses are refused naming what is wrong.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/qeval_checkpoint.h"
#include "records/record_verify.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using nlohmann::json;

const std::string kStories = "--model models/stories260K/stories260K.bin --max-windows 4";

// stories260K with every weight rounded to bfloat16, saved as a qeval checkpoint in `dir`/name.
std::string bf16_artifact(const test::TempDir& dir, const std::string& name) {
  LoadedCheckpoint parent = load_checkpoint(test::data_path("models/stories260K/stories260K.bin"));
  ModelWeights& w = parent.weights;
  auto round = [](at::Tensor& t) {
    if (t.defined()) t = t.to(at::kBFloat16).to(at::kFloat);
  };
  round(w.token_embedding);
  round(w.final_norm.weight);
  if (w.lm_head.defined() && !w.lm_head.is_same(parent.weights.token_embedding)) round(w.lm_head);
  for (BlockWeights& b : w.blocks)
    for (at::Tensor* t : {&b.attn_norm.weight, &b.mlp_norm.weight, &b.q.weight, &b.k.weight, &b.v.weight, &b.o.weight,
                          &b.up.weight, &b.gate.weight, &b.down.weight})
      round(*t);
  const std::filesystem::path out = dir / name;
  save_qeval_checkpoint(out, parent.config, w);
  return out.string();
}

TEST(CompareCheckpointCli, TheArtifactIsARowOfTheParentsRecord) {
  test::TempDir dir;
  const std::string artifact = bf16_artifact(dir, "stories-bf16");
  const json record = test::stories_eval_record(dir, "both", kStories + " --schemes full,int8-vectorwise --stats-for all "
                                                "--compare-checkpoint " + artifact);
  ASSERT_TRUE(record.is_object());
  ASSERT_EQ(record["schemes"].size(), 3u) << record["schemes"].dump();
  const json& row = record["schemes"][2];
  EXPECT_EQ(row["name"], "stories-bf16:float");
  const json& described = row["description"]["artifact"];
  EXPECT_EQ(described["format"], "qeval");
  EXPECT_GT(described["bytes_per_weight"].get<double>(), 3.9);  // float32 stored
  EXPECT_GT(described["weight_error"]["stored"]["max_relative_frobenius"].get<double>(), 1e-4);
  EXPECT_FALSE(described["weights_hash"].get<std::string>().empty());
  EXPECT_GT(row["vs_full"]["kl_mean"].get<double>(), 0.0) << row["vs_full"].dump();
  EXPECT_FALSE(row["statistics"].is_null()) << "--stats-for all measures the artifact too";
  EXPECT_NO_THROW(verify_record(record, "both.json"));

  // The row is the artifact's own evaluation: alone, as full precision, the same perplexity.
  const json alone = test::stories_eval_record(dir, "alone", "--model " + artifact + " --max-windows 4 --schemes full");
  ASSERT_TRUE(alone.is_object());
  for (const char* key : {"nll_mean", "nll_se", "ppl", "tokens"})
    EXPECT_EQ(alone["schemes"][0]["perplexity"][key], row["perplexity"][key]) << key << ": alone vs beside the parent";

  const test::CommandResult compare = test::run_qeval("compare " + (dir / "both.json").string());
  EXPECT_EQ(compare.status, 0) << compare.output;
  EXPECT_TRUE(test::contains(compare.output, "Artifacts beside their parent")) << compare.output;
  EXPECT_TRUE(test::contains(compare.output, "| stories-bf16:float | float | none |")) << compare.output;
}

TEST(CompareCheckpointCli, BadUsesAreRefusedNamingWhatIsWrong) {
  test::TempDir dir;
  const std::string artifact = bf16_artifact(dir, "art");
  const std::string base = test::kEval + " --data-dir " + test::data_dir().string() + " " + kStories;
  const test::CommandResult missing = test::run_qeval(base + " --compare-checkpoint " + (dir / "nowhere").string());
  EXPECT_NE(missing.status, 0);
  EXPECT_TRUE(test::contains(missing.output, "nowhere")) << missing.output;
  const test::CommandResult transformed = test::run_qeval(base + " --transform rotate --compare-checkpoint " + artifact);
  EXPECT_NE(transformed.status, 0);
  EXPECT_TRUE(test::contains(transformed.output, "--transform rotate")) << transformed.output;
  const test::CommandResult twice =
      test::run_qeval(base + " --compare-checkpoint " + artifact + " --compare-checkpoint " + artifact);
  EXPECT_NE(twice.status, 0);
  EXPECT_TRUE(test::contains(twice.output, "art:float")) << twice.output;
  // The output must not be written over the artifact (an input).
  const test::CommandResult over =
      test::run_qeval(base + " --compare-checkpoint " + artifact + " --out " + artifact + "/config.json");
  EXPECT_NE(over.status, 0);
  EXPECT_TRUE(test::contains(over.output, "--compare-checkpoint")) << over.output;
}

}  // namespace
}  // namespace qeval
