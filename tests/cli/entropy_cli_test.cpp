// qeval compare and qeval plot on records with per-layer entropies (SAMBA Fig. 5): a hybrid of 4
// layers (SSM 0 and 2, attention 1 and 3) and a dense model of 3, read and verified from files as
// any record is. The binary's path comes from ctest (QEVAL_BINARY).
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "tests/cli/run_qeval.h"
#include "tests/support/entropy_records.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using test::CommandResult;
using test::contains;
CommandResult run(const std::string& args) { return test::run_qeval(args); }

// Records written as they are: test::sealed would set every per-layer list to M values.
struct Files {
  test::TempDir dir;
  std::string write(const std::string& name, const nlohmann::json& j) const {
    test::write_bytes(dir / name, j.dump(2));
    return (dir / name).string();
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

nlohmann::json hybrid() {
  nlohmann::json r = test::hand_record("runs/hybrid", "softmax", "adam",
                                       {{"full", 10.0, 0.0, test::entropy_base_statistics(4)},
                                        {"int8-coarse", 10.5, 0.5, test::entropy_base_statistics(4)}});
  test::set_hybrid_entropies(r, 0);
  test::set_hybrid_entropies(r, 1, 0.125);
  return r;
}

nlohmann::json dense() {
  nlohmann::json r =
      test::hand_record("runs/dense", "softmax", "adam", {{"full", 9.0, 0.0, test::entropy_base_statistics(3)}});
  test::set_dense_entropies(r, 0);
  return r;
}

TEST(EntropyCli, CompareTabulatesEachRecordsLayers) {
  Files f;
  const std::string h = f.write("h.json", hybrid()), d = f.write("d.json", dense());
  CommandResult r = run("compare " + h + " " + d);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| layer | kind | hybrid entropy | hybrid selection | dense entropy | dense selection |\n"
                                 "|---:|---|---:|---:|---:|---:|\n"
                                 "| 1 | SSM / attention | 3.250 | 4.000 | 1.000 | — |\n"
                                 "| 2 | attention | 1.500 | — | — | — |\n"
                                 "| 3 | SSM / attention | 3.750 | — | 3.000 | — |\n"
                                 "| 4 | attention / — | 2.500 | — | — | — |\n"))
      << r.output;

  r = run("compare --scheme int8-coarse " + h + " " + d);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| 2 | attention / — | 1.625 | — | — | — |")) << r.output;  // dense has no int8-coarse
  EXPECT_TRUE(contains(r.output, "No statistics for scheme int8-coarse in: dense.")) << r.output;
  r = run("compare --scheme int8-nope " + h);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--scheme: no record has a scheme \"int8-nope\"")) << r.output;

  // One record: how its quantised scheme moves each layer.
  r = run("compare " + h);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| 1 | SSM | 3.250 | 4.000 | +0.1250 | +0.1250 |\n"
                                 "| 2 | attention | 1.500 | — | +0.1250 | — |\n"))
      << r.output;

  // A selection layer past the model is refused, naming it.
  nlohmann::json forged = hybrid();
  forged["schemes"][0]["statistics"]["selection"]["layers"] = {0, 7};
  r = run("compare " + f.write("forged.json", forged));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "selection.layers")) << r.output;
}

TEST(EntropyCli, PlotDrawsEntropyByLayerAndByScheme) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not on PATH (gnuplot-nox)";
  Files f;
  const std::string h = f.write("h.json", hybrid()), d = f.write("d.json", dense());
  CommandResult r = run("plot " + h + " " + d + " --out " + f.path("two"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, f.path("two") + "/entropy_by_layer.png\n")) << r.output;
  EXPECT_FALSE(contains(r.output, "entropy_by_scheme")) << r.output;
  EXPECT_GT(std::filesystem::file_size(f.dir / "two" / "entropy_by_layer.png"), 5000u);
  EXPECT_TRUE(contains(read_file(f.dir / "two" / "entropy_by_layer.dat"),
                       "# index 0: hybrid\n1 - 3.25 4\n2 1.5 - -\n3 - 3.75 NaN\n4 2.5 - -\n\n\n"
                       "# index 1: dense\n1 1 - -\n2 NaN - -\n3 3 - -\n"));

  r = run("plot " + h + " --out " + f.path("one"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, f.path("one") + "/entropy_by_scheme.png\n")) << r.output;
  EXPECT_TRUE(contains(read_file(f.dir / "one" / "entropy_by_scheme.dat"), "# index 1: int8-coarse\n1 - 3.375 4.125\n"));
}

}  // namespace
}  // namespace qeval
