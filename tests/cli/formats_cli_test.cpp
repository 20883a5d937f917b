// The formats users ship (issue 61) end to end on stories260K: every format preset evaluates in
// the one pass beside the int8 presets, with statistics and a rounding band; static schemes record
// their calibration (windows never evaluated, their hashes, each layer's scale) and give the same
// results in two merged shards as in one process; asking more calibration windows than the data
// holds, or an element type no format defines, is refused naming the scheme and the key.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using nlohmann::json;
using test::CommandResult;
using test::contains;

const std::string kData = " --data-dir " + test::data_dir().string() +
                          " --model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt "
                          "--seq-len 128 --max-windows 6";  // 6: calibration windows 6..21, where one layer's largest input is a first position

const json& scheme(const json& record, const std::string& name) {
  for (const auto& s : record.at("schemes"))
    if (s.at("name") == name) return s;
  ADD_FAILURE() << "no scheme " << name;
  static const json none;
  return none;
}

double dnll(const json& record, const std::string& name) {
  return scheme(record, name).at("vs_full").at("paired_dnll_mean").get<double>();
}

TEST(FormatsCli, EveryFormatPresetEvaluatesInOnePassWithStatisticsAndABand) {
  test::TempDir dir;
  const std::string out = (dir / "formats.json").string();
  const std::string schemes =
      "full,int8-moderate,fp8-e4m3,fp8-e4m3-tensor,fp8-e4m3-static,fp8-e5m2,mxfp8,mxfp6,mxfp4,mxfp4-weights,nvfp4,"
      "nvfp4-weights,int8-moderate-static,fp8-e4m3-static-keep1,mxfp4-keep1";
  const CommandResult r =
      test::run_qeval(test::kEval + kData + " --schemes " + schemes + " --stats-for all --rounding-band 1 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const json record = json::parse(read_file(out));
  for (const char* name : {"fp8-e4m3", "fp8-e4m3-tensor", "fp8-e4m3-static", "fp8-e5m2", "mxfp8", "mxfp6", "mxfp4",
                           "mxfp4-weights", "nvfp4", "nvfp4-weights", "int8-moderate-static"}) {
    SCOPED_TRACE(name);
    const json& s = scheme(record, name);
    EXPECT_TRUE(std::isfinite(s.at("perplexity").at("ppl").get<double>()));
    EXPECT_TRUE(s.contains("rounding_band"));
    EXPECT_FALSE(s.at("statistics").is_null());
    EXPECT_GT(std::fabs(dnll(record, name)), 0.0);
  }
  // Fewer bits cost more: MXFP4 W4A4 loses more than MXFP8 and than MXFP4 weights alone.
  EXPECT_GT(dnll(record, "mxfp4"), dnll(record, "mxfp8"));
  EXPECT_GT(dnll(record, "mxfp4"), dnll(record, "mxfp4-weights"));
  EXPECT_TRUE(contains(scheme(record, "nvfp4").at("description").at("execution").get<std::string>(), "FP8/FP6/FP4"));

  // The static scales: 16 calibration windows, none of them evaluated, a scale per quantised linear.
  const json& st = scheme(record, "fp8-e4m3-static").at("description").at("static_scales");
  EXPECT_EQ(st.at("windows"), 16);
  EXPECT_EQ(st.at("statistic"), "max");
  EXPECT_EQ(st.at("window_hashes").size(), 16u);
  EXPECT_EQ(st.at("calibration").at("disjoint_from_evaluation"), true);
  const json& layers = st.at("layers");
  EXPECT_EQ(layers.size(), 5u * 7u);  // stories260K: 5 layers of q, k, v, o, gate, up, down
  for (const json& l : layers) EXPECT_FLOAT_EQ(l.at("scale").get<float>(), l.at("amax").get<float>() / 448.0f);
  const json& keep = scheme(record, "fp8-e4m3-static-keep1").at("description").at("static_scales");
  EXPECT_EQ(keep.at("keep_first"), 1);
  bool smaller = false;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    EXPECT_LE(keep.at("layers")[i].at("amax").get<double>(), layers[i].at("amax").get<double>());
    smaller = smaller || keep.at("layers")[i].at("amax").get<double>() < layers[i].at("amax").get<double>();
  }
  EXPECT_TRUE(smaller) << "leaving the first position out of the calibration changed no layer's amax: "
                       << keep.at("layers").dump() << " against " << layers.dump();

  // compare shows the new schemes beside the old.
  const CommandResult c = test::run_qeval("compare " + out);
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_TRUE(contains(c.output, "Penalties by format family")) << c.output;
  EXPECT_TRUE(contains(c.output, "| OCP MX | stories260K | mxfp4 |")) << c.output;
  EXPECT_TRUE(contains(c.output, "| static scales | stories260K | int8-moderate-static |")) << c.output;
}

TEST(FormatsCli, StaticScalesAreTheSameInEveryShard) {
  test::TempDir dir;
  auto path = [&](const char* n) { return (dir / n).string(); };
  const std::string common = test::kEval + kData + " --schemes full,int8-moderate-static,fp8-e4m3-static";
  ASSERT_EQ(test::run_qeval(common + " --out " + path("one.json")).status, 0);
  for (const char* shard : {"0/2", "1/2"}) {
    const CommandResult r = test::run_qeval(common + " --shard " + shard + " --out " + path(shard[0] == '0' ? "s0.json" : "s1.json"));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  const CommandResult m = test::run_qeval("merge " + path("s0.json") + " " + path("s1.json") + " --out " + path("merged.json"));
  ASSERT_EQ(m.status, 0) << m.output;
  const json one = json::parse(read_file(path("one.json"))), merged = json::parse(read_file(path("merged.json")));
  for (const char* name : {"int8-moderate-static", "fp8-e4m3-static"}) {
    EXPECT_EQ(scheme(one, name).at("perplexity"), scheme(merged, name).at("perplexity")) << name;
    EXPECT_EQ(scheme(one, name).at("description").at("static_scales"),
              scheme(merged, name).at("description").at("static_scales")) << name;
  }
}

TEST(FormatsCli, BadCalibrationAndUnknownElementsAreRefused) {
  test::TempDir dir;
  std::ofstream(dir / "too-many.json") << R"({"weights": {"kind": "fp8", "element": "e4m3", "granularity": "tensor"},
    "input_activations": {"kind": "fp8", "element": "e4m3", "granularity": "tensor", "calibration": {"windows": 100000}}})";
  const CommandResult many =
      test::run_qeval(test::kEval + kData + " --schemes full," + (dir / "too-many.json").string());
  EXPECT_NE(many.status, 0);
  EXPECT_TRUE(contains(many.output, "100000 calibration windows")) << many.output;
  EXPECT_TRUE(contains(many.output, "calibration.windows")) << many.output;
  std::ofstream(dir / "e3m4.json") << R"({"weights": {"kind": "mx", "element": "e3m4", "granularity": "block:32"}})";
  const CommandResult element = test::run_qeval(test::kEval + kData + " --schemes full," + (dir / "e3m4.json").string());
  EXPECT_NE(element.status, 0);
  EXPECT_TRUE(contains(element.output, "e3m4.json")) << element.output;
  EXPECT_TRUE(contains(element.output, "element 'e3m4'")) << element.output;
  EXPECT_TRUE(contains(element.output, "e4m3, e5m2, e2m3, e3m2, e2m1")) << element.output;
}

}  // namespace
}  // namespace qeval
