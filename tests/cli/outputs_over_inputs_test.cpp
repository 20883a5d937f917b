// No output replaces an input (issue 63): for each subcommand, an output (--out, --report, a state
// file, eval --plots' and plot's files by their real names) that names one of the command's inputs
// (its --config, a scheme or --protocol file, the data, a record), through a link too, is refused
// naming the option and both paths, and the input is left as it was; pictures never go into a
// checkpoint folder. Every case is refused before any evaluation, so each is one short process.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/files.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

const std::string kTiny = test::kEval + " --seq-len 32 --max-windows 2 --schemes full,int8-coarse --no-attention-stats";

// Runs qeval, expects exit 2 with every fragment in the message, and `kept` unchanged.
void expect_refused(const std::string& args, const std::vector<std::string>& fragments, const fs::path& kept) {
  const std::string before = read_file(kept);
  const test::CommandResult r = test::run_qeval(args);
  SCOPED_TRACE("qeval " + args + "\n" + r.output);
  EXPECT_EQ(r.status, 2);
  for (const auto& f : fragments) EXPECT_TRUE(test::contains(r.output, f)) << "lacks \"" << f << "\"";
  EXPECT_EQ(read_file(kept), before) << kept << " was replaced";
}

TEST(OutputsOverInputs, EvalOutIsItsConfigFile) {
  test::TempDir dir;
  const fs::path config = dir / "eval.json";
  test::write_bytes(config, R"({"seq-len": 32, "max-windows": 2})");
  expect_refused(kTiny + " --config " + config.string() + " --out " + config.string(),
                 {"--out " + config.string(), "is the --config file"}, config);
}

TEST(OutputsOverInputs, EvalOutIsItsProtocolFileThroughALink) {
  test::TempDir dir;
  const fs::path protocol = dir / "protocol.json";
  fs::copy_file(test::repo_path("configs/protocols/windows.json"), protocol);
  fs::create_symlink(protocol, dir / "link.json");
  expect_refused(kTiny + " --protocol " + protocol.string() + " --out " + (dir / "link.json").string(),
                 {"--out", "link.json", "is the --protocol file", protocol.string()}, protocol);
}

TEST(OutputsOverInputs, EvalStateFileIsASchemeFile) {
  test::TempDir dir;
  const fs::path scheme = dir / "mine.json";
  fs::copy_file(test::repo_path("configs/schemes/int8-coarse.json"), scheme);
  expect_refused(test::kEval + " --seq-len 32 --max-windows 2 --no-attention-stats --schemes full," + scheme.string() +
                     " --resume --out " + (dir / "r.json").string() + " --state-file " + scheme.string(),
                 {"--state-file", "is the scheme file"}, scheme);
}

TEST(OutputsOverInputs, EvalPlotsNeverGoIntoTheCheckpointFolder) {
  test::TempDir dir;
  fs::copy_file(test::data_path("models/stories260K/stories260K.bin"), dir / "stories260K.bin");
  const test::CommandResult r = test::run_qeval(test::kEval + " --model " + (dir / "stories260K.bin").string() +
                                                " --seq-len 32 --max-windows 1 --schemes full --plots " +
                                                (dir / "figures").string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "--plots")) << r.output;
  EXPECT_TRUE(test::contains(r.output, "checkpoint folder")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "figures" / "figure_data.json"));
}

TEST(OutputsOverInputs, EvalPlotsCannotReplaceTheRecord) {
  test::TempDir dir;
  const fs::path record = dir / "figures" / "figure_data.json";
  fs::create_directories(record.parent_path());
  test::write_bytes(record, "{}");
  expect_refused(kTiny + " --plots " + (dir / "figures").string() + " --out " + record.string(),
                 {"--plots", "figure_data.json", "is also written as --out"}, record);
}

TEST(OutputsOverInputs, PlotFilesNeverReplaceAnInputRecord) {
  // The record (any bytes: the refusal comes before it is read) has the name of a file plot writes.
  test::TempDir dir;
  const fs::path record = dir / "layer_curves.dat";
  test::write_bytes(record, "a record kept under a plot's name");
  expect_refused("plot " + record.string() + " --out " + dir.path().string(),
                 {"--out", "layer_curves.dat", "is the record"}, record);
}

TEST(OutputsOverInputs, CheckReportIsItsConfigFile) {
  test::TempDir dir;
  const fs::path config = dir / "check.json";
  test::write_bytes(config, R"({"format": "md"})");
  test::write_bytes(dir / "r.json", "{}");
  expect_refused("check --config " + config.string() + " --baseline " + (dir / "r.json").string() +
                     " --tolerances " + (dir / "r.json").string() + " " + (dir / "r.json").string() + " --report " +
                     config.string(),
                 {"--report", "is the --config file"}, config);
}

TEST(OutputsOverInputs, CompareOutIsItsConfigFile) {
  test::TempDir dir;
  const fs::path config = dir / "compare.json";
  test::write_bytes(config, R"({"format": "md"})");
  expect_refused("compare --config " + config.string() + " " + (dir / "r.json").string() + " --out " + config.string(),
                 {"--out", "is the --config file"}, config);
}

TEST(OutputsOverInputs, SensitivityPlotDataIsTheDataFile) {
  // --plot x.png writes x.dat beside it: the evaluation text named x.dat is an input.
  test::TempDir dir;
  const fs::path data = dir / "bars.dat";
  fs::copy_file(test::data_path("text/tinystories/validation-head.txt"), data);
  expect_refused("sensitivity -q --tokenizer " + test::kStoriesTokenizer + " --seq-len 32 --max-windows 1 --data " +
                     data.string() + " --plot " + (dir / "bars.png").string(),
                 {"--plot", "bars.dat", "is the data file"}, data);
}

TEST(OutputsOverInputs, TrainOutHoldsItsData) {
  test::TempDir dir;
  const fs::path data = dir / "run" / "train.txt";
  fs::create_directories(data.parent_path());
  fs::copy_file(test::data_path("text/tinystories/validation-head.txt"), data);
  expect_refused("train -q --tokenizer " + test::kStoriesTokenizer + " --data " + data.string() +
                     " --d-model 16 --n-layers 1 --n-heads 2 --seq-len 16 --batch-size 2 --steps 2 --warmup 1 --out " +
                     (dir / "run").string(),
                 {"--out", "holds the --data file"}, data);
}

}  // namespace
}  // namespace qeval
