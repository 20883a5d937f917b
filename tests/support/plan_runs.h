// Evaluations over a plan for the tests that hold plans to each other (layer-major order, MoE and
// SSM fixtures, statistics): one set of schemes over a few short documents read through a byte
// tokenizer, and the bit-for-bit comparison of two such runs. Header-only: the tests that use it
// live in one binary.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "eval/schemes.h"
#include "loaders/checkpoints/model_reader.h"
#include "loaders/protocols/protocol.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval::test {

// Pangrams: every letter in every window, so the byte tokenizer's ids cover the vocabulary's start.
inline const std::vector<std::string>& plan_documents() {
  static const std::vector<std::string> docs = {
      "the quick brown fox jumps over the lazy dog and runs far away into the woods",
      "pack my box with five dozen liquor jugs, then carry it up the hill to the old mill",
      "sphinx of black quartz, judge my vow; how vexingly quick daft zebras jump",
      "a wizard's job is to vex chumps quickly in fog while the jukebox plays",
      "how razorback-jumping frogs can level six piqued gymnasts at the fair"};
  return docs;
}

struct PlanRunSetup {
  std::vector<std::string> schemes = {"full", "int8-coarse", "int8-fine", "int8-vectorwise", "w4-zeropoint-g128"};
  std::int64_t seq_len = 24;
  std::size_t documents = 5;  // the first n of plan_documents()
};

struct PlanRun {
  EvalResult result;
  std::vector<nlohmann::json> statistics;  // per scheme: its statistics summary
  PreparedSchemes prepared;                // descriptions finished (what a record would say)
};

// The plan named as the evaluator names them: "resident", "resident-weights" or "streamed".
inline EvalPlan plan_of(const std::string& name, std::int64_t chunk_windows) {
  EvalPlan p;
  p.name = name;
  p.keep_full_blocks = name != "streamed";
  p.keep_scheme_blocks = name == "resident";
  p.chunk_windows = chunk_windows;
  return p;
}

// Every scheme of `setup` with statistics for all, over the documents, under `plan` and `batch`.
inline PlanRun evaluate_over_plan(ModelReader& reader, const EvalPlan& plan, std::int64_t batch,
                                  const PlanRunSetup& setup = {}) {
  SchemeOptions so;
  so.stats_for = StatsFor::all;
  PlanRun run;
  run.prepared = make_schemes(reader.config(), setup.schemes, so);
  ByteTokenizer tok(reader.config().vocab_size);
  ProtocolSpec spec;
  spec.seq_len = setup.seq_len;
  const auto& all = plan_documents();
  std::vector<std::string> docs(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(std::min(setup.documents, all.size())));
  WindowStream stream(std::make_unique<ListDocuments>(docs), tok, spec);
  EvalOptions options;
  options.batch_size = batch;
  options.progress = false;
  options.plan = plan;
  run.result = evaluate(reader, run.prepared.schemes, stream, options);
  run.statistics = run.prepared.statistics_summaries();
  run.prepared.finish_descriptions();
  return run;
}

// Every window's row and every scheme's statistics summary equal, as JSON text (bits, not tolerances).
inline void expect_same_bits(const PlanRun& a, const PlanRun& b, const std::string& what) {
  ASSERT_EQ(a.result.schemes.size(), b.result.schemes.size()) << what;
  EXPECT_EQ(a.result.token_stream_hash(), b.result.token_stream_hash()) << what;
  for (std::size_t s = 0; s < a.result.schemes.size(); ++s) {
    ASSERT_EQ(a.result.schemes[s].rows.size(), b.result.schemes[s].rows.size()) << what;
    for (const auto& [w, row] : a.result.schemes[s].rows)
      EXPECT_EQ(row.to_json().dump(), b.result.schemes[s].rows.at(w).to_json().dump()) << what << ": scheme " << s << " window " << w;
    EXPECT_EQ(a.statistics[s].dump(), b.statistics[s].dump()) << what << ": statistics of scheme " << s;
  }
}

}  // namespace qeval::test
