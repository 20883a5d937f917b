// `qeval sensitivity` end to end on the default model (stories260K) and data: a layer's ΔNLL
// equals, as the same JSON number, the one `qeval eval` reports for a scheme file that selects
// only that layer; kinds, sorting, the table, the plot; bad input fails with one line and
// writes nothing. The binary's path comes from ctest (QEVAL_BINARY).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/files.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using test::CommandResult;
using test::contains;
CommandResult qeval(const std::string& args) { return test::run_qeval(args); }

const std::string kSensitivity = "sensitivity -q --tokenizer " + test::kStoriesTokenizer + " --seq-len 128 --max-windows 4";

const nlohmann::json& unit_named(const nlohmann::json& record, const std::string& name) {
  for (const auto& u : record.at("sensitivity").at("units"))
    if (u.at("unit") == name) return u;
  throw std::runtime_error("no unit " + name);
}

TEST(SensitivityCli, OneLayerEqualsEvalOfASchemeFileSelectingOnlyThatLayer) {
  test::TempDir dir;
  const std::string layer = "layers.1.mlp.down";
  CommandResult s = qeval(kSensitivity + " --batch-size 2 --out " + (dir / "s.json").string());
  ASSERT_EQ(s.status, 0) << s.output;

  nlohmann::json spec = nlohmann::json::parse(read_file(test::repo_path("configs/schemes/int8-moderate.json")));
  spec["name"] = "moderate-down1";
  spec["include"] = {layer};
  test::write_bytes(dir / "only.json", spec.dump(2));
  CommandResult e = qeval(test::kEval + " --seq-len 128 --max-windows 4 --stats-for none --schemes " +
                          (dir / "only.json").string() + " --out " + (dir / "e.json").string());
  ASSERT_EQ(e.status, 0) << e.output;

  const nlohmann::json sens = nlohmann::json::parse(read_file(dir / "s.json"));
  const nlohmann::json eval = nlohmann::json::parse(read_file(dir / "e.json"));
  const nlohmann::json& vs_full = eval.at("schemes").at(1).at("vs_full");
  const nlohmann::json& u = unit_named(sens, layer);
  ASSERT_TRUE(u.at("dnll_mean").is_number_float());
  EXPECT_EQ(u.at("dnll_mean"), vs_full.at("paired_dnll_mean"));  // the same double, as written
  EXPECT_EQ(u.at("dnll_se"), vs_full.at("paired_dnll_se"));
  EXPECT_EQ(u.at("kl_mean"), vs_full.at("kl_mean"));
  EXPECT_EQ(u.at("dppl_rel"), vs_full.at("dppl_rel"));
  EXPECT_NE(vs_full.at("paired_dnll_mean").get<double>(), 0.0);
  // The record's own scheme entry for the unit agrees too, window by window.
  int found = 0;
  for (const auto& scheme : sens.at("schemes"))
    if (scheme.at("name") == "int8-moderate@" + layer) {
      ++found;
      EXPECT_EQ(scheme.at("vs_full"), vs_full);
      EXPECT_EQ(scheme.at("per_window"), eval.at("schemes").at(1).at("per_window"));
    }
  EXPECT_EQ(found, 1);
  EXPECT_EQ(sens.at("protocol").at("token_stream_hash"), eval.at("protocol").at("token_stream_hash"));
  EXPECT_EQ(sens.at("schemes").at(0).at("perplexity"), eval.at("schemes").at(0).at("perplexity"));

  // Every linear of the 5 blocks is a unit, sorted by ΔNLL, with its input statistics.
  const auto& units = sens.at("sensitivity").at("units");
  EXPECT_EQ(units.size(), 5u * 7u);
  EXPECT_EQ(sens.at("schemes").size(), 1u + units.size());
  for (std::size_t i = 1; i < units.size(); ++i)
    EXPECT_GE(units[i - 1].at("dnll_mean").get<double>(), units[i].at("dnll_mean").get<double>()) << i;
  EXPECT_GT(u.at("inputs").at("max_abs").at("rest").get<double>(), 0.0);
  EXPECT_EQ(u.at("tokens").at("first").at("tokens"), 4);
  EXPECT_EQ(u.at("tokens").at("rest").at("tokens"), 4 * 126);
  EXPECT_EQ(u.at("tokens").at("top_positions").size(), 5u);
  // The printed table: a title naming model, data, windows and scheme; rows in rank order.
  EXPECT_TRUE(contains(s.output, "stories260K on validation-head.txt: 4 windows of 128 tokens")) << s.output;
  EXPECT_TRUE(contains(s.output, "int8-moderate applied to one layer at a time")) << s.output;
  EXPECT_TRUE(contains(s.output, "| 1 | " + units[0].at("unit").get<std::string>() + " |")) << s.output;
  EXPECT_TRUE(contains(s.output, "20 of 35 units shown")) << s.output;  // --top defaults to 20
}

TEST(SensitivityCli, KindGroupingHasOneUnitPerKindOverEveryBlock) {
  test::TempDir dir;
  CommandResult r = qeval(kSensitivity + " --by kind --scheme int8-coarse --top 3 --out " + (dir / "k.json").string());
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json record = nlohmann::json::parse(read_file(dir / "k.json"));
  const auto& units = record.at("sensitivity").at("units");
  std::set<std::string> kinds;
  for (const auto& u : units) {
    const std::string kind = u.at("unit").get<std::string>();
    kinds.insert(kind);
    std::vector<std::string> expected;
    for (int i = 0; i < 5; ++i) expected.push_back("layers." + std::to_string(i) + "." + kind);
    EXPECT_EQ(u.at("layers"), nlohmann::json(expected)) << kind;
    EXPECT_EQ(u.at("scheme"), "int8-coarse@" + kind);
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"attn.q", "attn.k", "attn.v", "attn.o", "mlp.gate", "mlp.up", "mlp.down"}));
  EXPECT_EQ(record.at("sensitivity").at("by"), "kind");
  EXPECT_TRUE(contains(r.output, "| 3 | ")) << r.output;
  EXPECT_FALSE(contains(r.output, "| 4 | ")) << r.output;
}

TEST(SensitivityCli, PlotDrawsABarChart) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0 && !std::getenv("QEVAL_GNUPLOT"))
    GTEST_SKIP() << "gnuplot absent (Debian package gnuplot-nox)";
  test::TempDir dir;
  CommandResult r = qeval(kSensitivity + " --max-windows 2 --by kind --plot " + (dir / "sens.png").string());
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream in(dir / "sens.png", std::ios::binary);
  char head[4] = {};
  in.read(head, 4);
  EXPECT_EQ(std::string(head + 1, 3), "PNG");
  EXPECT_TRUE(contains(read_file(dir / "sens.dat"), "mlp.down"));
}

TEST(SensitivityCli, BadInputFailsWithOneLineAndWritesNothing) {
  test::TempDir dir;
  const std::string out = " --out " + (dir / "r.json").string();
  CommandResult unknown = qeval(kSensitivity + " --scheme no-such-scheme" + out);
  EXPECT_EQ(unknown.status, 2);
  EXPECT_TRUE(contains(unknown.output, "unknown scheme 'no-such-scheme'")) << unknown.output;

  CommandResult by = qeval(kSensitivity + " --by block" + out);
  EXPECT_NE(by.status, 0);
  EXPECT_TRUE(contains(by.output, "block")) << by.output;

  nlohmann::json spec = nlohmann::json::parse(read_file(test::repo_path("configs/schemes/int8-moderate.json")));
  spec["name"] = "nothing";
  spec["include"] = {"layers.0.*"};
  spec["exclude"] = {"layers.*"};
  test::write_bytes(dir / "nothing.json", spec.dump());
  CommandResult nothing = qeval(kSensitivity + " --scheme " + (dir / "nothing.json").string() + out);
  EXPECT_EQ(nothing.status, 2);
  EXPECT_TRUE(contains(nothing.output, "scheme nothing selects no linear")) << nothing.output;

  CommandResult full = qeval(kSensitivity + " --scheme full" + out);
  EXPECT_EQ(full.status, 2);
  EXPECT_TRUE(contains(full.output, "quantises nothing")) << full.output;

  CommandResult svg = qeval(kSensitivity + " --plot " + (dir / "p.svg").string() + out);
  EXPECT_EQ(svg.status, 2);
  EXPECT_TRUE(contains(svg.output, ".png")) << svg.output;

  CommandResult folder = qeval(kSensitivity + " --out /nonexistent-folder/r.json");
  EXPECT_EQ(folder.status, 2);
  EXPECT_TRUE(contains(folder.output, "/nonexistent-folder")) << folder.output;

  EXPECT_FALSE(std::filesystem::exists(dir / "r.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "p.svg"));
}

}  // namespace
}  // namespace qeval
