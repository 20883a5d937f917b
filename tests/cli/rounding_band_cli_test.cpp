// The rounding band end to end (issue 53), on real runs of stories260K: `eval --rounding-band K`
// records K variants per quantised scheme and folds them into the scheme's band (the same numbers
// whatever the batch size or sharding), `compare` shows "ΔNLL ± se ± band", and `check` with a
// "band" rule passes a record whose penalty moved by rounding alone (the same schemes evaluated
// as another valid implementation, --rounding-seed) where an absolute limit alone fails it, fails
// a real regression (the same model rotated: its int8 penalty grew beyond three bands), and
// refuses a band rule against a baseline without a band. `sensitivity --rounding-band K` gives
// every unit its band; `plot` draws the penalties with both noises.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
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

const std::string kCommon = " --data-dir " + test::data_dir().string() +
                            " --model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt "
                            "--seq-len 256 --max-windows 16 --schemes full,int8-coarse,int8-moderate,w4-zeropoint";

json read_json(const std::string& path) { return json::parse(read_file(path)); }

const json& scheme(const json& record, const std::string& name) {
  for (const auto& s : record.at("schemes"))
    if (s.at("name") == name) return s;
  ADD_FAILURE() << "no scheme " << name;
  static const json none;
  return none;
}

struct Runs {
  test::TempDir dir;
  std::string path(const std::string& name) const { return (dir / name).string(); }
  // `eval` with the common arguments and `extra`, its record at `name`.
  json eval(const std::string& name, const std::string& extra) const {
    const CommandResult r = test::run_qeval(test::kEval + kCommon + " " + extra + " --out " + path(name));
    EXPECT_EQ(r.status, 0) << r.output;
    return read_json(path(name));
  }
};

TEST(RoundingBandCli, VariantsAreRecordedFoldedAndTheSameForAnyBatchOrShard) {
  Runs runs;
  const json record = runs.eval("band.json", "--rounding-band 3");
  ASSERT_EQ(record.at("schemes").size(), 4u + 3u * 3u);  // full precision is not repeated
  for (const char* name : {"int8-coarse", "int8-moderate", "w4-zeropoint"}) {
    SCOPED_TRACE(name);
    const json& s = scheme(record, name);
    ASSERT_TRUE(s.contains("rounding_band"));
    const json& band = s.at("rounding_band");
    EXPECT_EQ(band.at("variants"), 3);
    EXPECT_EQ(band.at("seeds"), json::array({1, 2, 3}));
    ASSERT_EQ(band.at("delta_nll").size(), 4u);  // the scheme's own, then each variant's
    EXPECT_EQ(band.at("delta_nll")[0], s.at("vs_full").at("paired_dnll_mean"));
    const json& variant = scheme(record, std::string(name) + "~r2");
    EXPECT_EQ(variant.at("description").at("rounding_band_of"), name);
    EXPECT_EQ(band.at("delta_nll")[2], variant.at("vs_full").at("paired_dnll_mean"));
  }
  // Activation rounding moves the int8 penalties; 4-bit weights with float activations hardly move.
  EXPECT_GT(scheme(record, "int8-moderate").at("rounding_band").at("delta_nll_sd").get<double>(), 1e-5);
  EXPECT_LT(scheme(record, "w4-zeropoint").at("rounding_band").at("delta_nll_sd").get<double>(), 1e-6);
  EXPECT_EQ(scheme(record, "full").count("rounding_band"), 0u);

  // The variants' noise is drawn per window: another batch size and two merged shards give the
  // same band to the last bit.
  const json batched = runs.eval("batched.json", "--rounding-band 3 --batch-size 4");
  const CommandResult s0 = test::run_qeval(test::kEval + kCommon + " --rounding-band 3 --shard 0/2 --out " + runs.path("s0.json"));
  const CommandResult s1 = test::run_qeval(test::kEval + kCommon + " --rounding-band 3 --shard 1/2 --out " + runs.path("s1.json"));
  ASSERT_EQ(s0.status, 0) << s0.output;
  ASSERT_EQ(s1.status, 0) << s1.output;
  const CommandResult m =
      test::run_qeval("merge " + runs.path("s0.json") + " " + runs.path("s1.json") + " --out " + runs.path("merged.json"));
  ASSERT_EQ(m.status, 0) << m.output;
  const json merged = read_json(runs.path("merged.json"));
  for (const char* name : {"int8-coarse", "int8-moderate"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(scheme(batched, name).at("rounding_band").at("delta_nll"), scheme(record, name).at("rounding_band").at("delta_nll"));
    EXPECT_EQ(scheme(merged, name).at("rounding_band").at("delta_nll"), scheme(record, name).at("rounding_band").at("delta_nll"));
  }

  // compare: each scheme's ΔNLL with both noises; the variants are not rows of their own.
  const CommandResult c = test::run_qeval("compare " + runs.path("band.json"));
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_TRUE(contains(c.output, "Rounding band")) << c.output;
  EXPECT_TRUE(contains(c.output, "| int8-moderate | ")) << c.output;
  EXPECT_FALSE(contains(c.output, "int8-moderate~r1")) << c.output;
}

// `--dtype fp64`: the schemes' maths with every float rounding in float64 (the CPU only), the
// reference another implementation's penalty is measured against. Full precision hardly moves;
// a 4-bit weight-only scheme rounds nothing at run time, so neither does its penalty; the int8
// penalties move by rounding decisions taken the other way, and stay within a few of the float32
// evaluation's bands (measured on this test's 16 × 256 tokens: 0.3 to 1.4 bands).
TEST(RoundingBandCli, Float64EvaluationIsAnImplementationInsideTheBand) {
  Runs runs;
  const json fp32 = runs.eval("fp32.json", "--rounding-band 4");
  const json fp64 = runs.eval("fp64.json", "--dtype fp64");
  EXPECT_EQ(fp64.at("precision").at("dtype"), "fp64");
  const double nll32 = scheme(fp32, "full").at("perplexity").at("nll_mean").get<double>();
  const double nll64 = scheme(fp64, "full").at("perplexity").at("nll_mean").get<double>();
  EXPECT_LT(std::abs(nll64 - nll32), 1e-6 * nll32);
  auto penalty = [](const json& record, const char* name) {
    return scheme(record, name).at("vs_full").at("paired_dnll_mean").get<double>();
  };
  for (const char* name : {"int8-coarse", "int8-moderate", "w4-zeropoint"}) {
    SCOPED_TRACE(name);
    const json& s = scheme(fp64, name);
    EXPECT_EQ(s.at("description").at("execution"), "fp64 reference");
    EXPECT_NE(s.at("kernels_used").dump().find("float64 reference on cpu"), std::string::npos) << s.at("kernels_used");
  }
  EXPECT_LT(std::abs(penalty(fp64, "w4-zeropoint") - penalty(fp32, "w4-zeropoint")), 1e-6);
  double largest_move = 0;
  for (const char* name : {"int8-coarse", "int8-moderate"}) {
    SCOPED_TRACE(name);
    const double move = std::abs(penalty(fp64, name) - penalty(fp32, name));
    const double band = scheme(fp32, name).at("rounding_band").at("delta_nll_sd").get<double>();
    EXPECT_LT(move, 4 * band);
    largest_move = std::max(largest_move, move);
  }
  EXPECT_GT(largest_move, 1e-5) << "float64 should decide some activation roundings the other way";
}

// A quantised LM head is an input like any other: a scheme that quantises only the head has a
// band (its variants' head inputs move by ulps), where before issue 53's follow-up its variants
// were the scheme itself, bit for bit.
TEST(RoundingBandCli, AQuantisedLmHeadIsJitteredToo) {
  Runs runs;
  test::write_bytes(runs.dir / "head.json", R"({"name": "head-int8", "weights": {"kind": "int8_absmax", "granularity": "tensor"},
    "input_activations": {"kind": "int8_absmax", "granularity": "tensor"}, "include": ["lm_head"], "quantize_lm_head": true})");
  const CommandResult r = test::run_qeval(test::kEval + " --data-dir " + test::data_dir().string() +
                                          " --model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt"
                                          " --seq-len 256 --max-windows 8 --stats-for none --rounding-band 3 --schemes full," +
                                          runs.path("head.json") + " --out " + runs.path("head-band.json"));
  ASSERT_EQ(r.status, 0) << r.output;
  const json record = read_json(runs.path("head-band.json"));
  const json& band = scheme(record, "head-int8").at("rounding_band");
  const json& dnll = band.at("delta_nll");
  ASSERT_EQ(dnll.size(), 4u);
  int moved = 0;
  for (std::size_t i = 1; i < dnll.size(); ++i) moved += dnll[i] != dnll[0];
  EXPECT_GE(moved, 1) << dnll;
  EXPECT_GT(band.at("delta_nll_sd").get<double>(), 0.0);
}

bool have_gnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0 || std::getenv("QEVAL_GNUPLOT"); }

// `plot` of a record with a band: penalties.png, and its data rows carry each scheme's paired ΔNLL,
// se and band as the record has them (the variants are not rows of their own).
TEST(RoundingBandCli, PlotDrawsEachPenaltyWithItsSeAndBand) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot absent (Debian package gnuplot-nox)";
  Runs runs;
  const json record = runs.eval("band.json", "--rounding-band 2 --stats-for full");
  const CommandResult r = test::run_qeval("plot " + runs.path("band.json") + " --out " + runs.path("fig"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "penalties.png")) << r.output;
  std::ifstream png(runs.dir / "fig" / "penalties.png", std::ios::binary);
  char head[4] = {};
  png.read(head, 4);
  EXPECT_EQ(std::string(head + 1, 3), "PNG");
  std::istringstream dat(read_file(runs.dir / "fig" / "penalties.dat"));
  int rows = 0;
  for (std::string line; std::getline(dat, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    double x = 0, mean = 0, se = 0, band = 0;
    std::string name;
    in >> x >> name >> mean >> se >> band;
    SCOPED_TRACE(line);
    EXPECT_EQ(name.find("~r"), std::string::npos);
    const json& s = scheme(record, name);
    auto near = [](double got, const json& expected) {  // the data file keeps 9 significant digits
      const double e = expected.get<double>();
      EXPECT_NEAR(got, e, 1e-8 * std::abs(e) + 1e-15);
    };
    near(mean, s.at("vs_full").at("paired_dnll_mean"));
    near(se, s.at("vs_full").at("paired_dnll_se"));
    near(band, s.at("rounding_band").at("delta_nll_sd"));
    ++rows;
  }
  EXPECT_EQ(rows, 3);  // int8-coarse, int8-moderate, w4-zeropoint
}

// `sensitivity --rounding-band 2 --by kind`: every unit's band is over the unit's own ΔNLL and its
// two variants' (scheme entries of their own in the record, "<scheme>@<kind>~r<seed>"), the table
// shows "± band", and the plot's data carries it.
TEST(RoundingBandCli, SensitivityGivesEveryUnitItsBand) {
  Runs runs;
  const std::string png = have_gnuplot() ? " --plot " + runs.path("sens.png") : "";
  // The llama2.c tokenizer, as every CLI test: the SentencePiece one beside the model cannot load under ASan.
  const CommandResult r = test::run_qeval("sensitivity -q --tokenizer " + test::kStoriesTokenizer + " --data-dir " +
                                          test::data_dir().string() + " --model models/stories260K/stories260K.bin --data "
                                          "text/tinystories/validation-head.txt --seq-len 128 --max-windows 4 --by kind "
                                          "--scheme int8-coarse --rounding-band 2 --out " +
                                          runs.path("sens.json") + png);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "ΔNLL ± se ± band")) << r.output;
  const json record = read_json(runs.path("sens.json"));
  const json& units = record.at("sensitivity").at("units");
  ASSERT_EQ(units.size(), 7u);
  EXPECT_EQ(record.at("schemes").size(), 1u + 7u * 3u);
  bool some_band = false;
  for (const auto& u : units) {
    SCOPED_TRACE(u.at("unit").get<std::string>());
    ASSERT_TRUE(u.contains("rounding_band"));
    const json& band = u.at("rounding_band");
    ASSERT_EQ(band.at("delta_nll").size(), 3u);
    EXPECT_EQ(band.at("delta_nll")[0], u.at("dnll_mean"));
    const std::string name = u.at("scheme").get<std::string>();
    EXPECT_EQ(band.at("delta_nll")[1], scheme(record, name + "~r1").at("vs_full").at("paired_dnll_mean"));
    EXPECT_EQ(band.at("delta_nll")[2], scheme(record, name + "~r2").at("vs_full").at("paired_dnll_mean"));
    some_band = some_band || band.at("delta_nll_sd").get<double>() > 0;
  }
  EXPECT_TRUE(some_band);  // int8-coarse's activation rounding moves somewhere
  if (!png.empty()) EXPECT_TRUE(contains(read_file(runs.dir / "sens.dat"), "rounding_band_sd"));
}

TEST(RoundingBandCli, BandGatePassesARoundingMoveAndFailsARealRegression) {
  Runs runs;
  // The baseline is one valid implementation (rounding variant 16, with its band), the record to
  // check another (the default one): the same schemes on the same model, only rounded otherwise.
  runs.eval("baseline.json", "--rounding-band 4 --rounding-seed 16");
  runs.eval("reimplemented.json", "");
  runs.eval("rotated.json", "--transform rotate");  // another model: a real change of the penalty
  runs.eval("no-band.json", "--rounding-seed 16");
  test::write_bytes(runs.dir / "band.json", R"({"schemes": {"int8-moderate": {"dppl_abs": 0.001, "band": 3}}})");
  test::write_bytes(runs.dir / "abs.json", R"({"schemes": {"int8-moderate": {"dppl_abs": 0.001}}})");
  auto check = [&](const std::string& baseline, const std::string& current, const std::string& tolerances) {
    return test::run_qeval("check --baseline " + runs.path(baseline) + " " + runs.path(current) + " --tolerances " +
                           runs.path(tolerances));
  };
  // Moved by rounding alone: within three bands, though beyond the absolute limit.
  const json base = read_json(runs.path("baseline.json")), re = read_json(runs.path("reimplemented.json"));
  const double moved = re.at("schemes")[2].at("vs_full").at("dppl").get<double>() -
                       base.at("schemes")[2].at("vs_full").at("dppl").get<double>();
  ASSERT_GT(moved, 0.001) << "the other implementation should raise the penalty past the absolute limit";
  CommandResult r = check("baseline.json", "reimplemented.json", "band.json");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "3 × band")) << r.output;
  r = check("baseline.json", "reimplemented.json", "abs.json");
  EXPECT_EQ(r.status, 1) << r.output;
  // A real regression: beyond three bands.
  r = check("baseline.json", "rotated.json", "band.json");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "**FAIL**")) << r.output;
  // A band rule needs a baseline with a band.
  r = check("no-band.json", "reimplemented.json", "band.json");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "no rounding band")) << r.output;
  EXPECT_TRUE(contains(r.output, "--rounding-band")) << r.output;
}

}  // namespace
}  // namespace qeval
