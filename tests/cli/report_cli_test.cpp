// qeval compare / check / plot end to end on hand-made records: every exit status (0, 1, 2) and
// the one-line error naming the file or field. The binary's path comes from ctest (QEVAL_BINARY).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "tests/support/hand_records.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using test::CommandResult;
using test::contains;
CommandResult run(const std::string& args, const std::string& env = "") { return test::run_qeval(args, env); }

struct Files {
  test::TempDir dir;
  std::string path(const std::string& name) const { return (dir / name).string(); }
  // A hand record is written with rows and summaries rebuilt from the PPL / ΔPPL a test set
  // (test::sealed), so that it passes verify_record as a record qeval wrote would.
  std::string write(const std::string& name, const nlohmann::json& j) const {
    const bool record = j.is_object() && j.contains("schemes") && j.contains("protocol");
    test::write_bytes(dir / name, (record ? test::sealed(j) : j).dump(2));
    return path(name);
  }
};

nlohmann::json base_record() {
  return test::hand_record("runs/base", "softmax", "adam",
                           {{"full", 10.0, 0.0, test::hand_statistics(4.0, 3.0, 20.0, 5.0, 10.0, 20.0)},
                            {"int8-coarse", 12.0, 2.0},
                            {"int8-fine", 10.1, 0.1}});
}

const nlohmann::json kTolerances = nlohmann::json::parse(R"({
  "schemes": {"*": {"dppl_abs": 0.5, "dppl_rel": 0.1}, "full": {"ppl_rel": 0.02}},
  "statistics": {"kurtosis_rest": {"abs": 1.0, "rel": 0.25}, "first_attn_pct": {"abs": 5}}
})");

TEST(ReportCli, CompareTwoRecordsExitsZeroWithBothTables) {
  Files f;
  auto a = f.write("a.json", base_record());
  auto other = test::hand_record("runs/ortho", "softmax1", "orthoadam",
                                 {{"full", 9.5, 0.0, test::hand_statistics(3.0, 3.0, 6.0, 4.0, 1.0, 0.0)}});
  auto b = f.write("b.json", other);
  CommandResult r = run("compare " + a + " " + b);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| base | no | no | 10.000 |")) << r.output;
  EXPECT_TRUE(contains(r.output, "| ortho | yes | yes | 9.500 |")) << r.output;
  EXPECT_TRUE(contains(r.output, "| base | 10.000 | +2.0000 | — | +0.1000 | — |")) << r.output;
  r = run("compare --format csv " + a + " " + b);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "\northo,")) << r.output;
  r = run("compare --format json --out " + f.path("c.json") + " " + a + " " + b);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(read_file(f.dir / "c.json"))["rows"].size(), 2u);
}

TEST(ReportCli, CompareRefusalsExitTwo) {
  Files f;
  auto a = f.write("a.json", base_record());
  nlohmann::json longer = base_record();
  longer["protocol"] = test::hand_protocol(512);
  auto b = f.write("b.json", longer);
  CommandResult r = run("compare " + a + " " + b);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "seq_len")) << r.output;
  r = run("compare --allow-protocol-mismatch " + a + " " + b);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "WARNING")) << r.output;
  r = run("compare --format xml " + a);
  EXPECT_EQ(r.status, 2) << r.output;
  r = run("compare");
  EXPECT_EQ(r.status, 2) << r.output;
  r = run("compare " + f.path("absent.json"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "absent.json")) << r.output;
  test::write_bytes(f.dir / "broken.json", "{\"schema_version\": 1,");
  r = run("compare " + f.path("broken.json"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "broken.json")) << r.output;
  r = run("compare --labels one,two " + a);
  EXPECT_EQ(r.status, 2) << r.output;
}

TEST(ReportCli, CheckExitsZeroWhenWithinTolerance) {
  Files f;
  auto base = f.write("base.json", base_record());
  nlohmann::json now = base_record();
  now["schemes"][1]["vs_full"]["dppl"] = 2.2;  // +0.2, within 0.5
  auto rec = f.write("now.json", now);
  auto tol = f.write("tol.json", kTolerances);
  CommandResult r = run("check --baseline " + base + " --tolerances " + tol + " " + rec);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "PASS")) << r.output;
}

TEST(ReportCli, CheckExitsOneNamingEveryViolation) {
  Files f;
  auto base = f.write("base.json", base_record());
  nlohmann::json now = base_record();
  now["schemes"][1]["vs_full"]["dppl"] = 3.0;  // +1.0 > max(0.5, 0.2)
  now["schemes"][0]["statistics"]["attention"]["first_attn_pct"] = 30.0;  // +20 > 5
  auto rec = f.write("now.json", now);
  auto tol = f.write("tol.json", kTolerances);
  CommandResult r = run("check --baseline " + base + " --tolerances " + tol + " --report " + f.path("report.md") + " " + rec);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "FAIL: 2 of")) << r.output;
  EXPECT_TRUE(contains(r.output, "- int8-coarse ΔPPL: baseline 2, new 3, worse by 1, allowed 0.5")) << r.output;
  EXPECT_TRUE(contains(r.output, "- full first_attn_pct: baseline 10, new 30, worse by 20, allowed 5")) << r.output;
  EXPECT_TRUE(contains(read_file(f.dir / "report.md"), "FAIL: 2 of"));
  r = run("check --format json --baseline " + base + " --tolerances " + tol + " " + rec);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["violations"], 2);
}

TEST(ReportCli, CheckUnusableInputExitsTwo) {
  Files f;
  auto base = f.write("base.json", base_record());
  auto tol = f.write("tol.json", kTolerances);
  nlohmann::json missing = base_record();
  missing["schemes"].erase(1);
  auto rec_missing = f.write("missing.json", missing);
  nlohmann::json other_protocol = base_record();
  other_protocol["protocol"] = test::hand_protocol(128);
  auto rec_protocol = f.write("protocol.json", other_protocol);
  auto bad_tol = f.write("bad_tol.json", nlohmann::json::parse(R"({"schemes": {"*": {"dppl_abs": -1}}})"));
  test::write_bytes(f.dir / "broken_tol.json", "{");

  struct Case {
    std::string args, must_name;
  };
  const std::vector<Case> cases = {
      {"--baseline " + base + " --tolerances " + tol + " " + rec_missing, "no scheme 'int8-coarse'"},
      {"--baseline " + base + " --tolerances " + tol + " " + rec_protocol, "seq_len"},
      {"--baseline " + base + " --tolerances " + tol + " " + f.path("absent.json"), "absent.json"},
      {"--baseline " + f.path("absent.json") + " --tolerances " + tol + " " + base, "absent.json"},
      {"--baseline " + base + " --tolerances " + f.path("absent_tol.json") + " " + base, "absent_tol.json"},
      {"--baseline " + base + " --tolerances " + bad_tol + " " + base, "dppl_abs"},
      {"--baseline " + base + " --tolerances " + f.path("broken_tol.json") + " " + base, "broken_tol.json"},
      {"--tolerances " + tol + " " + base, "--baseline"},
      {"--baseline " + base + " " + base, "--tolerances"},
      {"--baseline " + base + " --tolerances " + tol, "exactly one record"},
      {"--baseline " + base + " --tolerances " + tol + " --format xml " + base, "--format"},
  };
  for (const auto& c : cases) {
    CommandResult r = run("check " + c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, c.must_name)) << c.args << "\n" << r.output;
    EXPECT_TRUE(contains(r.output, "qeval: error:")) << r.output;
  }
  // The mismatch is allowed when asked: then the numbers decide.
  CommandResult r = run("check --allow-protocol-mismatch --baseline " + base + " --tolerances " + tol + " " + rec_protocol);
  EXPECT_EQ(r.status, 0) << r.output;
}

TEST(ReportCli, PlotWithoutGnuplotNamesThePackage) {
  Files f;
  auto rec = f.write("r.json", base_record());
  CommandResult r = run("plot " + rec + " --out " + f.path("pics"), "PATH=/nonexistent");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "gnuplot-nox")) << r.output;
  r = run("plot " + rec + " --out " + f.path("pics"), "QEVAL_GNUPLOT=/nonexistent/gnuplot");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "gnuplot-nox")) << r.output;
}

bool have_gnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

TEST(ReportCli, PlotDrawsTheCurvesOfARecord) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not on PATH (Debian package gnuplot-nox)";
  Files f;
  auto rec = f.write("r.json", base_record());
  CommandResult r = run("plot " + rec + " --out " + f.path("pics"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "layer_curves.png")) << r.output;
  EXPECT_GT(std::filesystem::file_size(f.dir / "pics" / "layer_curves.png"), 5000u);
  r = run("plot " + rec + " --scheme int8-coarse --out " + f.path("pics"));  // no statistics for it
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--stats-for all")) << r.output;
  // Several records: their curves on shared axes; figure-data maps are one model's, so not with two.
  r = run("plot " + rec + " " + rec + " --out " + f.path("two"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_GT(std::filesystem::file_size(f.dir / "two" / "layer_curves.png"), 5000u);
  r = run("plot " + rec + " " + rec + " --figure-data " + f.path("fd.json") + " --out " + f.path("three"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "give one record with it, found 2")) << r.output;
}

TEST(ReportCli, EvalPlotsWritesFigureDataAndPictures) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not on PATH (Debian package gnuplot-nox)";
  Files f;
  CommandResult r = run(test::kEval + " --schemes full --seq-len 64 --max-windows 2 --out " + f.path("r.json") + " --plots " +
                        f.path("pics"));
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* name : {"attention_map.png", "hidden_abs.png", "layer_curves.png", "figure_data.json"})
    EXPECT_TRUE(std::filesystem::exists(f.dir / "pics" / name)) << name << "\n" << r.output;
  auto fd = nlohmann::json::parse(read_file(f.dir / "pics" / "figure_data.json"));
  EXPECT_EQ(fd["windows"], 2);
  EXPECT_EQ(fd["layers"], 5);  // stories260K
  EXPECT_EQ(fd["attention_map"]["T"], 64);
  // Without gnuplot the evaluation does not start: no record, exit 2 naming the package.
  r = run(test::kEval + " --schemes full --seq-len 64 --max-windows 2 --out " + f.path("r2.json") + " --plots " + f.path("p2"),
          "QEVAL_GNUPLOT=/nonexistent/gnuplot");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "gnuplot-nox")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(f.dir / "r2.json"));
}

}  // namespace
}  // namespace qeval
