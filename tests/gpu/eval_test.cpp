// `qeval eval --device cuda` against the CPU run of the same command (issue 32): full precision
// and every preset, with statistics, on stories260K. Every test here skips, saying why, without a
// CUDA device or in a build whose LibTorch has no CUDA; on a GPU machine scripts/gpu-check runs
// them and keeps their output (the tables below) in results/gpu/.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/gpu.h"
#include "tests/support/test_data.h"

namespace qeval::test {
namespace {

using nlohmann::json;

const std::string kAllSchemes =
    "full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise,w4-zeropoint,w4-zeropoint-g128";

json eval_record(const TempDir& dir, const std::string& name, const std::string& args) {
  const std::string out = (dir / (name + ".json")).string();
  CommandResult r = run_qeval(kEval + " --data-dir " + data_dir().string() + " " + args + " --out " + out);
  EXPECT_EQ(r.status, 0) << r.output;
  std::ifstream in(out);
  if (!in) return json();
  return json::parse(in);
}

double relative(double got, double expected) {
  return std::abs(got - expected) / std::max(std::abs(expected), 1e-12);
}

// The statistics the paper's tables use, by path in a record's "statistics".
const std::vector<std::pair<std::string, json::json_pointer>> kStatistics = {
    {"kurtosis first", json::json_pointer("/hidden/kurtosis/first")},
    {"kurtosis rest", json::json_pointer("/hidden/kurtosis/rest")},
    {"max |x| first", json::json_pointer("/hidden/max_abs/first")},
    {"max |x| rest", json::json_pointer("/hidden/max_abs/rest")},
    {"%first-attn", json::json_pointer("/attention/first_attn_pct")},
    {"first-token share", json::json_pointer("/attention/first_token_share")},
    {"sink rate %", json::json_pointer("/attention/sink_rate_pct")},
    {"attention entropy", json::json_pointer("/attention/entropy")},
};

TEST(GpuEval, Fp32AgreesWithTheCpuOnStories260k) {
  QEVAL_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string common = "--max-windows 16 --batch-size 4 --stats-for all --schemes " + kAllSchemes;
  const json cpu = eval_record(dir, "cpu", common);
  const json gpu = eval_record(dir, "gpu", common + " --device cuda --dtype fp32");
  ASSERT_FALSE(cpu.is_null() || gpu.is_null());
  EXPECT_EQ(gpu["precision"]["dtype"], "fp32");
  EXPECT_EQ(gpu["precision"]["device"], "cuda:0");
  ASSERT_EQ(cpu["schemes"].size(), gpu["schemes"].size());
  std::cout << "\n| scheme | CPU NLL | GPU NLL (fp32) | GPU − CPU | relative | worst statistic (relative) |\n"
               "|---|---:|---:|---:|---:|---|\n";
  for (std::size_t i = 0; i < cpu["schemes"].size(); ++i) {
    const json& c = cpu["schemes"][i];
    const json& g = gpu["schemes"][i];
    ASSERT_EQ(c["name"], g["name"]);
    const double nc = c.at("perplexity").at("nll_mean").get<double>(), ng = g.at("perplexity").at("nll_mean").get<double>();
    std::string worst = "-";
    double worst_rel = 0;
    // Full precision: statistics within 1e-4 relative (1e-9 absolute for values 0 on both). A
    // quantised scheme amplifies the float rounding differences: an activation a rounding step
    // nearer one code than the other flips its int8 code, and per-tensor scales move with the
    // maximum, so its statistics are held to 1e-2 (measured on the H200: at most 1.6e-3).
    const double bound = i == 0 ? 1e-4 : 1e-2;
    for (const auto& [label, pointer] : kStatistics) {
      const double sc = c.at("statistics").at(pointer).get<double>(), sg = g.at("statistics").at(pointer).get<double>();
      const double rel = std::abs(sg - sc) <= 1e-9 ? 0.0 : relative(sg, sc);
      if (rel >= worst_rel) {
        worst_rel = rel;
        worst = label;
      }
      EXPECT_TRUE(std::abs(sg - sc) <= 1e-9 || rel <= bound)
          << c["name"] << " " << label << ": CPU " << sc << ", GPU " << sg << " (relative " << rel << ")";
    }
    std::cout << "| " << c["name"].get<std::string>() << " | " << nc << " | " << ng << " | " << ng - nc << " | "
              << relative(ng, nc) << " | " << worst << " (" << worst_rel << ") |\n";
    if (i == 0)
      EXPECT_LE(relative(ng, nc), 1e-5) << "full precision: CPU " << nc << ", GPU fp32 " << ng;
    else
      EXPECT_LE(std::abs(ng - nc), 5e-3) << c["name"] << ": CPU " << nc << ", GPU fp32 " << ng;
  }
}

TEST(GpuEval, HalfPrecisionsAgainstFp32AreMeasured) {
  QEVAL_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string common = "--max-windows 16 --batch-size 4 --stats-for none --schemes full,int8-moderate,int8-vectorwise --device cuda";
  const json f32 = eval_record(dir, "fp32", common + " --dtype fp32");
  const json f16 = eval_record(dir, "fp16", common);  // the default on a GPU
  const json b16 = eval_record(dir, "bf16", common + " --dtype bf16");
  ASSERT_FALSE(f32.is_null() || f16.is_null() || b16.is_null());
  EXPECT_EQ(f16["precision"]["dtype"], "fp16");
  EXPECT_EQ(b16["precision"]["dtype"], "bf16");
  std::cout << "\n| scheme | fp32 NLL | fp16 − fp32 | bf16 − fp32 |\n|---|---:|---:|---:|\n";
  for (std::size_t i = 0; i < f32["schemes"].size(); ++i) {
    const double a = f32["schemes"][i]["perplexity"]["nll_mean"], h = f16["schemes"][i]["perplexity"]["nll_mean"],
                 b = b16["schemes"][i]["perplexity"]["nll_mean"];
    std::cout << "| " << f32["schemes"][i]["name"].get<std::string>() << " | " << a << " | " << h - a << " | " << b - a
              << " |\n";
    // Loose sanity bounds: half precision moves a 260K-parameter model's NLL by far less than this.
    EXPECT_LE(std::abs(h - a), 0.02) << "fp16";
    EXPECT_LE(std::abs(b - a), 0.05) << "bf16";
  }
}

// On the GPU, float GEMMs and attention run over the whole batch, so another batch size may round
// differently (the record says so); this bounds how much, and prints it.
TEST(GpuEval, BatchSizeMovesResultsOnlyByRounding) {
  QEVAL_SKIP_WITHOUT_GPU();
  TempDir dir;
  const std::string common = "--max-windows 16 --stats-for full --device cuda --schemes " + kAllSchemes;
  const json one = eval_record(dir, "b1", common + " --batch-size 1");
  const json eight = eval_record(dir, "b8", common + " --batch-size 8");
  ASSERT_FALSE(one.is_null() || eight.is_null());
  std::cout << "\n| scheme (fp16) | NLL, batch 1 | batch 8 − batch 1 |\n|---|---:|---:|\n";
  for (std::size_t i = 0; i < one["schemes"].size(); ++i) {
    const double a = one["schemes"][i]["perplexity"]["nll_mean"], b = eight["schemes"][i]["perplexity"]["nll_mean"];
    std::cout << "| " << one["schemes"][i]["name"].get<std::string>() << " | " << a << " | " << b - a << " |\n";
    EXPECT_LE(relative(b, a), 1e-4) << one["schemes"][i]["name"];
  }
  const double k1 = one["schemes"][0]["statistics"]["hidden"]["kurtosis"]["rest"];
  const double k8 = eight["schemes"][0]["statistics"]["hidden"]["kurtosis"]["rest"];
  EXPECT_LE(relative(k8, k1), 1e-3) << "kurtosis (rest)";
}

TEST(GpuEval, RecordNamesTheGpu) {
  QEVAL_SKIP_WITHOUT_GPU();
  TempDir dir;
  const json r = eval_record(dir, "r", "--max-windows 2 --schemes full,int8-vectorwise --device cuda");
  ASSERT_FALSE(r.is_null());
  const std::string description = r["precision"]["device_description"];
  EXPECT_NE(description.find("sm_"), std::string::npos) << description;
  EXPECT_NE(description.find("CUDA driver"), std::string::npos) << description;
  EXPECT_TRUE(r["precision"].contains("batch_size_independent"));
  EXPECT_TRUE(r["schemes"][1]["description"].contains("placement")) << r["schemes"][1]["description"].dump();
}

TEST(GpuEval, RefusesClearlyWithoutAGpu) {
  if (gpu_unavailable().empty()) GTEST_SKIP() << "this machine has a CUDA device: the refusal cannot be shown here";
  CommandResult r = run_qeval(kEval + " --data-dir " + data_dir().string() + " --max-windows 1 --device cuda");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "--device cuda")) << r.output;
}

TEST(GpuEval, HalfPrecisionOnTheCpuIsRefused) {
  CommandResult r = run_qeval(kEval + " --data-dir " + data_dir().string() + " --max-windows 1 --dtype fp16");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "--dtype fp16 on the CPU")) << r.output;
}

}  // namespace
}  // namespace qeval::test
