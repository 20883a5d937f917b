// --dtype fp64 planned and kept apart (issue 63): the memory plan counts float64 bytes for a float64
// run, and compare puts an fp32 and an fp64 record side by side only when told to, naming both.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/files.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using nlohmann::json;

const std::string kTiny = test::kEval + " --seq-len 32 --max-windows 2 --schemes full,int8-coarse --no-attention-stats";

struct Records {
  test::TempDir dir;
  std::string fp32, fp64;
};

// One fp32 and one fp64 record of the same evaluation, made once for the tests below.
const Records& records() {
  static const std::unique_ptr<Records> made = [] {
    auto r = std::make_unique<Records>();
    r->fp32 = (r->dir / "fp32.json").string();
    r->fp64 = (r->dir / "fp64.json").string();
    for (const auto& [dtype, out] : {std::pair{std::string("fp32"), r->fp32}, std::pair{std::string("fp64"), r->fp64}}) {
      const test::CommandResult run = test::run_qeval(kTiny + " --dtype " + dtype + " --out " + out);
      EXPECT_EQ(run.status, 0) << run.output;
    }
    return r;
  }();
  return *made;
}

TEST(Fp64Apart, PlanCountsFloat64Bytes) {
  const json r32 = json::parse(read_file(records().fp32)), r64 = json::parse(read_file(records().fp64));
  const json& b32 = r32.at("plan").at("breakdown");
  const json& b64 = r64.at("plan").at("breakdown");
  // The float64 copies every scheme's placed layers and head hold, and twice the activations.
  ASSERT_TRUE(b64.contains("float64_weights")) << b64.dump(1);
  EXPECT_GT(b64.at("float64_weights").get<std::int64_t>(), 0);
  EXPECT_FALSE(b32.contains("float64_weights"));
  EXPECT_GT(b64.at("per_window").get<std::int64_t>(), b32.at("per_window").get<std::int64_t>() * 3 / 2);
  EXPECT_GT(r64.at("plan").at("estimated_peak_host_bytes").get<std::int64_t>(),
            r32.at("plan").at("estimated_peak_host_bytes").get<std::int64_t>());
}

TEST(Fp64Apart, CompareRefusesMixedPrecision) {
  const test::CommandResult r = test::run_qeval("compare " + records().fp32 + " " + records().fp64);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "precision.dtype")) << r.output;
  EXPECT_TRUE(test::contains(r.output, "--allow-protocol-mismatch")) << r.output;
}

TEST(Fp64Apart, CompareWithMismatchAllowedNamesEachPrecision) {
  const test::CommandResult r = test::run_qeval("compare --allow-protocol-mismatch " + records().fp32 + " " + records().fp64);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(test::contains(r.output, "precisions differ")) << r.output;
  EXPECT_TRUE(test::contains(r.output, "\"fp64\"")) << r.output;
  EXPECT_TRUE(test::contains(r.output, "\"fp32\"")) << r.output;
}

}  // namespace
}  // namespace qeval
