// compare --timings writes --labels as the other tables do (issue 79): a '|' escaped in Markdown, so
// a label can neither add a column nor start a row, and a label a spreadsheet would take for a
// formula ('=' first) quoted in CSV.
#include <gtest/gtest.h>

#include <string>

#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using test::CommandResult;
using test::contains;

TEST(TimingsLabels, PipesAndFormulasInLabelsAreEscapedInTheTimingsTable) {
  test::TempDir dir;
  const std::string out = (dir / "r.json").string();
  const CommandResult r = test::run_qeval(test::kEval + " --data-dir " + test::data_dir().string() +
                                          " --seq-len 32 --max-windows 1 --schemes full --no-attention-stats --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const CommandResult md = test::run_qeval("compare --timings --labels 'a|b=c' " + out);
  ASSERT_EQ(md.status, 0) << md.output;
  const std::size_t at = md.output.find("Time by phase");
  ASSERT_NE(at, std::string::npos) << md.output;
  const std::string timings = md.output.substr(at);
  EXPECT_TRUE(contains(timings, "\n| a\\|b=c | ")) << timings;
  EXPECT_FALSE(contains(md.output, "| a|b=c")) << md.output;
  const CommandResult csv = test::run_qeval("compare --timings --format csv --labels '=1+2|x' " + out);
  ASSERT_EQ(csv.status, 0) << csv.output;
  EXPECT_TRUE(contains(csv.output, "\n'=1+2|x,")) << csv.output;
  EXPECT_FALSE(contains(csv.output, "\n=1+2|x,")) << csv.output;
}

}  // namespace
}  // namespace qeval
