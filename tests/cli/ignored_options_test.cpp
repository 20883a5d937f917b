// Issue 63, "nothing is silently ignored": an option that has no effect in the run it is given to
// is refused (naming it and what it needs), an ε that moves no float32 input is refused with the
// smallest that does, an empty size is not "no cap", and `train` refuses, before its first step,
// sizes whose product cannot fit, naming the options that drive the estimate.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/files.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using test::CommandResult;
using test::contains;

const std::string kSmall = test::kEval + " --seq-len 32 --max-windows 2 --threads 1";

struct Refusal {
  std::string options;
  std::vector<std::string> expected;
};

void expect_refused(const std::string& command, const std::vector<std::string>& expected) {
  SCOPED_TRACE(command);
  const CommandResult r = test::run_qeval(command);
  EXPECT_EQ(r.status, 2) << r.output;
  for (const auto& part : expected) EXPECT_TRUE(contains(r.output, part)) << part << "\n" << r.output;
}

TEST(IgnoredOptions, EvalOptionsWithoutEffectAreRefused) {
  for (const Refusal& bad : std::vector<Refusal>{
           {"--schemes full,int8-coarse --rounding-band-eps 1e-5",
            {"--rounding-band-eps 1e-05: sizes the input jitter of --rounding-band and --rounding-seed"}},
           {"--schemes full --rounding-band 2", {"--rounding-band 2: --schemes full has no quantised scheme to vary"}},
           {"--schemes full --rounding-seed 5", {"--rounding-seed 5: --schemes full has no quantised scheme"}},
           // 1 + ε·u rounds to 1 in float32 for every u when ε <= 2^-25: a band of exactly 0, measured as nothing.
           {"--schemes full,int8-coarse --rounding-band 2 --rounding-band-eps 2.9e-8",
            {"--rounding-band-eps 2.9e-08: moves no float32 input", "just above 2^-25", "2^-24 = 5.96e-08"}},
           {"--schemes full,int8-coarse --rounding-band 2 --rounding-band-eps 1e-12", {"moves no float32 input"}},
           {"--no-attention-stats --mamba-channels 4",
            {"--mamba-channels 4: chooses the channels of the Mamba layers' implicit attention, which --no-attention-stats"}},
           {"--stats-for none --mamba-channels 4", {"--mamba-channels 4", "--stats-for none does not measure"}},
           {"--no-attention-stats --sink-T 8", {"--sink-T: the sink rate is an attention statistic"}},
           {"--stats-for none --sink-eps 0.2", {"--sink-eps", "--stats-for none"}},
           {"--plots-colour-scale log", {"--plots-colour-scale: colours the --plots maps"}},
           {"--max-memory ''", {"--max-memory", "an empty size is not \"no cap\""}},
           {"--max-memory 0.1B", {"--max-memory", "at least one byte"}},
       })
    expect_refused(kSmall + " " + bad.options, bad.expected);
  // sensitivity's band takes the same ε, under the same rules.
  const std::string sensitivity = "sensitivity -q --tokenizer " + test::kStoriesTokenizer + " --seq-len 32 --max-windows 2";
  expect_refused(sensitivity + " --rounding-band-eps 1e-5", {"--rounding-band-eps 1e-05: sizes the input jitter of --rounding-band"});
  expect_refused(sensitivity + " --rounding-band 1 --rounding-band-eps 1e-9", {"--rounding-band-eps 1e-09: moves no float32 input"});
}

// The smallest power of two above the floor moves inputs: the band it reports was measured.
TEST(IgnoredOptions, AnEpsThatMovesInputsGivesAMeasuredBand) {
  test::TempDir dir;
  const std::string out = (dir / "band.json").string();
  const CommandResult r =
      test::run_qeval(kSmall + " --schemes full,int8-coarse --rounding-band 2 --rounding-band-eps 5.96e-8 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json record = nlohmann::json::parse(read_file(out));
  ASSERT_EQ(record.at("schemes").size(), 4u);  // full, int8-coarse and its two variants
  EXPECT_NE(record["schemes"][2]["perplexity"]["nll_mean"], record["schemes"][1]["perplexity"]["nll_mean"])
      << "a variant moved by 2^-24 is another run, not the scheme itself";
}

// Sizes inside each option's range whose product cannot fit: refused before the first step with the
// estimate and the options behind it, not LibTorch's allocator message minutes later.
TEST(IgnoredOptions, TrainRefusesWhatCannotFitBeforeTheFirstStep) {
  const std::string train = "train -q --data " + test::data_path("text/tinystories/validation-head.txt").string() +
                            " --tokenizer " + test::data_path(test::kStoriesTokenizer).string() +
                            " --steps 2 --warmup 1 --threads 1";
  expect_refused(train + " --d-model 32 --n-layers 2 --batch-size 65536 --seq-len 65536",
                 {"train needs at least", "--batch-size 65536 x --seq-len 65536", "--d-model 32", "lower them"});
  expect_refused(train + " --d-model 65536 --n-layers 1024 --d-ff 1048576 --batch-size 1 --seq-len 16",
                 {"train needs at least", "--d-model 65536, --n-layers 1024, --d-ff 1048576"});
}

}  // namespace
}  // namespace qeval
