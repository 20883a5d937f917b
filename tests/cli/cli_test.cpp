// The qeval executable end to end: exit codes, one-line errors naming the file, and no partial
// record on failure. The binary's path comes from ctest (QEVAL_BINARY).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "records/record.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using test::CommandResult;
using test::contains;
CommandResult qeval(const std::string& args) { return test::run_qeval(args); }

TEST(Cli, EvalWritesRecordAndTable) {
  test::TempDir dir;
  auto out = dir / "r.json";
  CommandResult r = qeval(test::kEval + " --seq-len 128 --max-windows 4 --out " + out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| full |")) << r.output;
  auto record = nlohmann::json::parse(read_file(out));
  EXPECT_EQ(record.at("schema_version"), 1);
  EXPECT_EQ(record.at("protocol").at("windows"), 4);
  EXPECT_EQ(record.at("protocol").at("scored_tokens"), 4 * 127);
  EXPECT_EQ(record.at("model").at("format"), "llama2c");
  EXPECT_EQ(record.at("precision").at("dtype"), "fp32");
  double ppl = record.at("schemes").at(0).at("perplexity").at("ppl");
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, 20.0);  // a trained model on its own kind of text, far below the vocabulary (512)
  // Where the time went: every phase named, adding up to the total; the forward and the read measured.
  const auto& timings = record.at("timings");
  double sum = 0;
  for (const auto& [phase, seconds] : timings.at("phases").items()) {
    EXPECT_GE(seconds.get<double>(), 0.0) << phase;
    sum += seconds.get<double>();
  }
  EXPECT_NEAR(sum, timings.at("total_s").get<double>(), 1e-6);
  EXPECT_GT(timings.at("phases").at("forward").get<double>(), 0.0);
  EXPECT_GT(timings.at("phases").at("read").get<double>(), 0.0);
  EXPECT_GT(timings.at("phases").at("head").get<double>(), 0.0);
  for (const auto& scheme : record.at("schemes"))
    EXPECT_GT(timings.at("schemes").at(scheme.at("name").get<std::string>()).at("forward").get<double>(), 0.0);
  CommandResult shown = qeval("compare --timings " + out.string());
  ASSERT_EQ(shown.status, 0) << shown.output;
  EXPECT_TRUE(contains(shown.output, "Time by phase")) << shown.output;
  EXPECT_TRUE(contains(shown.output, "| quantize | copy | forward | statistics | head |")) << shown.output;
}

// QEVAL_CPU_ATTENTION picks the CPU attention path (model/causal_attention_cpu.h); the record names
// the one that ran, the paths agree to the last bits, and a value it does not know is an error
// before any work, with no record.
TEST(Cli, CpuAttentionSwitchIsRecordedAndUnknownValuesRefused) {
  test::TempDir dir;
  const std::string eval = test::kEval + " --seq-len 128 --max-windows 2 --schemes full --out ";
  auto run_with = [&](const std::string& value) {
    const auto out = dir / ("r-" + value + ".json");
    CommandResult r = test::run_qeval(eval + out.string(), "QEVAL_CPU_ATTENTION=" + value);
    EXPECT_EQ(r.status, 0) << value << ": " << r.output;
    return nlohmann::json::parse(read_file(out));
  };
  const auto whole = run_with("whole"), blocked = run_with("blocked"), avx2 = run_with("fused-avx2"), plain = run_with("");
  EXPECT_EQ(whole.at("options").at("cpu_attention"), "whole matrix (batched matmul)");
  EXPECT_EQ(blocked.at("options").at("cpu_attention"), "blocked");
  const std::string path = plain.at("options").at("cpu_attention");
  EXPECT_TRUE(path == "blocked" || contains(path, "fused (")) << path;
  // fused-avx2 is the plain path where there is no AVX-512, blocked where there is no AVX2.
  EXPECT_TRUE(avx2.at("options").at("cpu_attention") == "fused (avx2)" || path == "blocked") << avx2.at("options");
  auto nll = [](const nlohmann::json& rec) { return rec.at("schemes").at(0).at("perplexity").at("nll_mean").get<double>(); };
  for (const auto* other : {&blocked, &avx2, &plain}) EXPECT_NEAR(nll(*other), nll(whole), 1e-6 * nll(whole));

  const auto refused = dir / "refused.json";
  CommandResult r = test::run_qeval(eval + refused.string(), "QEVAL_CPU_ATTENTION=sideways");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "QEVAL_CPU_ATTENTION=sideways: expected fused, fused-avx2, blocked or whole")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(refused));
}

TEST(Cli, ConfigFileSuppliesOptionsAndFlagsOverride) {
  test::TempDir dir;
  test::write_bytes(dir / "c.json", R"({"seq-len": 64, "max-windows": 3, "quiet": true})");
  CommandResult r = qeval("eval --tokenizer " + test::kStoriesTokenizer + " --config " + (dir / "c.json").string() + " --max-windows 2 --out " + (dir / "r.json").string());
  ASSERT_EQ(r.status, 0) << r.output;
  auto record = nlohmann::json::parse(read_file(dir / "r.json"));
  EXPECT_EQ(record.at("protocol").at("seq_len"), 64);
  EXPECT_EQ(record.at("protocol").at("windows"), 2);
}

TEST(Cli, MissingModelFailsNamingItAndWritesNothing) {
  test::TempDir dir;
  CommandResult r = qeval("eval -q --model /nonexistent/model.bin --out " + (dir / "r.json").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.output, "/nonexistent/model.bin")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "r.json"));
}

TEST(Cli, TokenizerModelVocabularyMismatchIsAnError) {
  test::TempDir dir;
  CommandResult r = qeval("eval -q --tokenizer tokenizers/gpt2/encoder.json --out " + (dir / "r.json").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.output, "50257")) << r.output;
  EXPECT_TRUE(contains(r.output, "512")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "r.json"));
}

TEST(Cli, CorruptDataFailsWithoutPartialRecord) {
  test::TempDir dir;
  test::write_bytes(dir / "bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": broken\n");
  CommandResult r = qeval(test::kEval + " --data " + (dir / "bad.jsonl").string() + " --out " + (dir / "r.json").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.output, "bad.jsonl")) << r.output;
  EXPECT_TRUE(contains(r.output, "line 2")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "r.json"));
}

TEST(Cli, OutputFolderMustExistBeforeWork) {
  CommandResult r = qeval(test::kEval + " --max-windows 1 --out /nonexistent-folder/r.json");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.output, "/nonexistent-folder")) << r.output;
}

TEST(Cli, UnknownOptionAndHelp) {
  CommandResult bad = qeval("eval --no-such-option");
  EXPECT_NE(bad.status, 0);
  CommandResult help = qeval("eval --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_TRUE(contains(help.output, "--seq-len")) << help.output;
  EXPECT_TRUE(contains(help.output, "512")) << "defaults are shown: " << help.output;
}

TEST(Cli, InspectDescribesCheckpointAsJson) {
  CommandResult r = qeval("inspect --json models/stories260K/stories260K-tok512-f32.gguf");
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("model").at("format"), "gguf");
  EXPECT_EQ(j.at("model").at("config").at("n_layers"), 5);
  EXPECT_EQ(j.at("model").at("config").at("n_kv_heads"), 4);
}

// A scheme file is shown and recorded by its "name" (the path goes in the record); two schemes
// with one name are refused; the execution column holds one word, the reason a footnote.
TEST(Cli, SchemeFileShownByNameAndExecutionReasonInFootnote) {
  test::TempDir dir;
  test::write_bytes(dir / "mine.json", R"({"name": "my-fine", "weights": {"kind": "int8_absmax", "granularity": "channel"},
    "input_activations": {"kind": "int8_absmax", "granularity": "feature"}})");
  const std::string file = (dir / "mine.json").string();
  CommandResult r = qeval(test::kEval + " --seq-len 64 --max-windows 2 --schemes full,int8-fine," + file + " --out " +
                          (dir / "r.json").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "| my-fine | reference [2] |")) << r.output;
  EXPECT_TRUE(contains(r.output, "| int8-fine | reference [1] |")) << r.output;
  EXPECT_TRUE(contains(r.output, "[1] int8-fine: ")) << r.output;
  EXPECT_FALSE(contains(r.output, "| " + file)) << "the path is not the table's name: " << r.output;
  auto record = nlohmann::json::parse(read_file(dir / "r.json"));
  EXPECT_EQ(record.at("schemes").at(2).at("name"), "my-fine");
  EXPECT_EQ(record.at("schemes").at(2).at("description").at("scheme_file"), file);
  EXPECT_NE(record.at("schemes").at(1).at("description").at("execution").get<std::string>().find("reference ("),
            std::string::npos) << "the record keeps the full reason";

  test::write_bytes(dir / "clash.json", R"({"name": "int8-fine", "weights": {"kind": "int8_absmax", "granularity": "tensor"}})");
  CommandResult clash = qeval(test::kEval + " --seq-len 64 --max-windows 2 --schemes full,int8-fine," +
                              (dir / "clash.json").string() + " --out " + (dir / "c.json").string());
  EXPECT_NE(clash.status, 0);
  EXPECT_TRUE(contains(clash.output, "two schemes are named 'int8-fine'")) << clash.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "c.json"));
}

// A scheme that keeps tokens in full precision records which positions it kept, over every window.
TEST(Cli, KeptPositionsAreRecordedForKeepTokenSchemes) {
  test::TempDir dir;
  CommandResult r = qeval(test::kEval + " --seq-len 64 --max-windows 3 --batch-size 2 --schemes full,int8-moderate,int8-moderate-keep1 --out " +
                          (dir / "r.json").string());
  ASSERT_EQ(r.status, 0) << r.output;
  auto record = nlohmann::json::parse(read_file(dir / "r.json"));
  EXPECT_FALSE(record.at("schemes").at(1).contains("kept_positions"));
  const auto& kept = record.at("schemes").at(2).at("kept_positions");
  EXPECT_EQ(kept.at("rule"), "first");
  EXPECT_EQ(kept.at("count"), 1);
  // Position 0 only, kept by every quantised linear in each of the 3 windows.
  ASSERT_EQ(kept.at("positions").size(), 1u) << kept.dump();
  EXPECT_EQ(kept.at("positions").at(0).at(0), 0);
  for (const auto& layer : kept.at("layers")) EXPECT_EQ(layer.at("sequences"), 3) << layer.dump();
}

// The README's CI-gate example, run as the README shows it (from the repository root): today's
// evaluation of the committed OrthoAdam model passes against the committed baseline (a record
// written by an older qeval must not stop the gate it documents), and the Adam model trained
// alike is stopped by its outliers.
TEST(Cli, ReadmeGateExamplePassesAgainstTheCommittedBaseline) {
  test::TempDir dir;
  const std::string repo = test::repo_path("").string();
  const std::string gate = "check --baseline configs/ci/orthoadam-baseline.json --tolerances configs/ci/tolerances.json ";
  const std::string orthoadam = (dir / "orthoadam.json").string(), adam = (dir / "adam.json").string();
  CommandResult r = test::run_qeval("eval -q --config configs/ci/eval.json --out " + orthoadam, "", repo);
  ASSERT_EQ(r.status, 0) << r.output;
  CommandResult check = test::run_qeval(gate + orthoadam, "", repo);
  EXPECT_EQ(check.status, 0) << check.output;
  EXPECT_TRUE(contains(check.output, "PASS")) << check.output;

  r = test::run_qeval("eval -q --config configs/ci/eval.json --model results/train/mix/A-d256-s0-10k --out " + adam, "", repo);
  ASSERT_EQ(r.status, 0) << r.output;
  check = test::run_qeval(gate + adam, "", repo);
  EXPECT_EQ(check.status, 1) << check.output;
  EXPECT_TRUE(contains(check.output, "- full kurtosis_rest: baseline")) << check.output;
}

// inspect counts windows for eval's default protocol unless asked, as a table.
TEST(Cli, InspectCountsOneProtocolAsATableUnlessAskedForAll) {
  const std::string data = " --tokenizer " + test::kStoriesTokenizer + " --data text/tinystories/validation-head.txt --seq-len 256";
  CommandResult one = qeval("inspect" + data);
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_TRUE(contains(one.output, "| protocol | seq_len | windows |")) << one.output;
  EXPECT_TRUE(contains(one.output, "| windows | 256 |")) << one.output;
  EXPECT_FALSE(contains(one.output, "| stride |")) << one.output;
  CommandResult all = qeval("inspect --protocol all" + data);
  ASSERT_EQ(all.status, 0) << all.output;
  for (const char* name : {"| windows |", "| stride |", "| llamacpp |", "| gptq-c4 |"})
    EXPECT_TRUE(contains(all.output, name)) << name << "\n" << all.output;
}

}  // namespace
}  // namespace qeval

namespace qeval {
namespace {

nlohmann::json results_of(const std::filesystem::path& record_path) {
  auto r = nlohmann::json::parse(read_file(record_path));
  nlohmann::json out = {{"protocol", r.at("protocol")}, {"schemes", nlohmann::json::array()}};
  for (const auto& s : r.at("schemes"))
    out["schemes"].push_back({{"name", s.at("name")},
                              {"perplexity", s.at("perplexity")},
                              {"vs_full", s.at("vs_full")},
                              {"statistics", s.at("statistics")},
                              {"per_window", s.at("per_window")},
                              {"per_token", s.value("per_token", nlohmann::json(nullptr))},
                              {"position_buckets", s.value("position_buckets", nlohmann::json(nullptr))}});
  return out;
}

const std::string kSmallEval = test::kEval + " --seq-len 96 --max-windows 9 --schemes full,int8-coarse --stats-for all";

TEST(CliScale, FourShardsMergeIntoTheOneRunRecordBitForBit) {
  test::TempDir dir;
  ASSERT_EQ(qeval(kSmallEval + " --out " + (dir / "one.json").string()).status, 0);
  std::string shards;
  for (int i = 0; i < 4; ++i) {
    auto path = dir / ("shard" + std::to_string(i) + ".json");
    CommandResult r = qeval(kSmallEval + " --shard " + std::to_string(i) + "/4 --out " + path.string());
    ASSERT_EQ(r.status, 0) << r.output;
    shards = path.string() + " " + shards;  // merge takes them in any order
  }
  CommandResult merged = qeval("merge " + shards + "--out " + (dir / "merged.json").string());
  ASSERT_EQ(merged.status, 0) << merged.output;
  EXPECT_EQ(results_of(dir / "merged.json"), results_of(dir / "one.json"));
  // The KL and Δp percentiles too: merge read every shard's per-token values beside its record.
  const auto one = nlohmann::json::parse(read_file(dir / "one.json"));
  ASSERT_TRUE(one["schemes"][1]["per_token"]["kl"].contains("percentiles"));
  EXPECT_TRUE(std::filesystem::is_directory(dir / "shard0.json.tokens"));
  EXPECT_TRUE(std::filesystem::exists(dir / "one.json.tokens") == false) << "a plain run keeps no per-token values";
  // A shard's values that are not its rows' are refused; without them the merge has no percentiles.
  const auto values = dir / "shard0.json.tokens" / "scheme-1.values";
  std::string bytes = read_file(values);
  bytes[16 + 7] ^= 0x01;  // the first window's first KL value, its exponent moved
  test::write_bytes(values, bytes);
  CommandResult forged = qeval("merge " + shards + "--out " + (dir / "bad.json").string());
  EXPECT_EQ(forged.status, 2) << forged.output;
  EXPECT_TRUE(contains(forged.output, "the values are not this record's")) << forged.output;
  std::filesystem::remove_all(dir / "shard0.json.tokens");
  CommandResult without = qeval("merge " + shards + "--out " + (dir / "without.json").string());
  ASSERT_EQ(without.status, 0) << without.output;
  EXPECT_TRUE(contains(without.output, "no KL or Δp percentiles")) << without.output;
  const auto w = nlohmann::json::parse(read_file(dir / "without.json"));
  EXPECT_FALSE(w["schemes"][1]["per_token"]["kl"].contains("percentiles"));
  EXPECT_EQ(w["schemes"][1]["per_token"]["kl"]["mean"], one["schemes"][1]["per_token"]["kl"]["mean"]);

  // Failing paths: a shard missing, a shard twice, a shard of another evaluation.
  CommandResult missing = qeval("merge " + (dir / "shard0.json").string() + " " + (dir / "shard1.json").string() +
                                " --out " + (dir / "bad.json").string());
  EXPECT_EQ(missing.status, 2);
  EXPECT_TRUE(contains(missing.output, "missing")) << missing.output;
  CommandResult twice = qeval("merge " + (dir / "shard0.json").string() + " " + (dir / "shard0.json").string() +
                              " --out " + (dir / "bad.json").string());
  EXPECT_TRUE(contains(twice.output, "twice")) << twice.output;
  ASSERT_EQ(qeval(test::kEval + " --seq-len 64 --max-windows 9 --schemes full,int8-coarse --stats-for all --shard 1/4 --out " +
                  (dir / "other.json").string())
                .status,
            0);
  CommandResult other = qeval("merge " + (dir / "shard0.json").string() + " " + (dir / "other.json").string() +
                              " --out " + (dir / "bad.json").string());
  EXPECT_TRUE(contains(other.output, "evaluated something else")) << other.output;
  CommandResult not_shard = qeval("merge " + (dir / "one.json").string() + " --out " + (dir / "bad.json").string());
  EXPECT_TRUE(contains(not_shard.output, "not a shard record")) << not_shard.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.json"));
}

TEST(CliScale, KilledRunResumesToTheUninterruptedRecord) {
  test::TempDir dir;
  ASSERT_EQ(qeval(kSmallEval + " --out " + (dir / "one.json").string()).status, 0);
  auto out = (dir / "resumed.json").string();
  // A controlled stop after 4 windows stands in for a kill: the state file is what survives.
  CommandResult stopped = qeval(kSmallEval + " --resume --stop-after 4 --out " + out);
  EXPECT_EQ(stopped.status, 3) << stopped.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_TRUE(std::filesystem::exists(out + ".state.json"));
  CommandResult resumed = qeval(kSmallEval + " --resume --out " + out);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "4 windows already done")) << resumed.output;
  EXPECT_EQ(results_of(out), results_of(dir / "one.json"));
  EXPECT_FALSE(std::filesystem::exists(out + ".state.json")) << "state file removed once the record is written";
  EXPECT_FALSE(std::filesystem::exists(out + ".state.json.tokens")) << "per-token values removed with the state";

  // A state saved by a build that hashed the weight files (no model_weights_kind in its identity)
  // is refused for what it is, not mixed in and not called another evaluation.
  auto old_out = (dir / "old-build.json").string();
  ASSERT_EQ(qeval(kSmallEval + " --resume --stop-after 4 --out " + old_out).status, 3);
  nlohmann::json old_state = nlohmann::json::parse(read_file(old_out + ".state.json"));
  old_state["identity"].erase("model_weights_kind");
  old_state["identity"]["model_weights"] = "0123456789abcdef";
  test::write_bytes(old_out + ".state.json", old_state.dump());
  CommandResult old_build = qeval(kSmallEval + " --resume --out " + old_out);
  EXPECT_EQ(old_build.status, 2) << old_build.output;
  EXPECT_TRUE(contains(old_build.output, "hashed the weights by another definition")) << old_build.output;
  EXPECT_FALSE(std::filesystem::exists(old_out));

  // A state file from another evaluation is refused, not silently mixed in.
  ASSERT_EQ(qeval(kSmallEval + " --resume --stop-after 2 --out " + out).status, 3);
  CommandResult mismatch =
      qeval(test::kEval + " --seq-len 64 --max-windows 9 --schemes full,int8-coarse --stats-for all --resume --out " + out);
  EXPECT_EQ(mismatch.status, 2);
  EXPECT_TRUE(contains(mismatch.output, "different evaluation")) << mismatch.output;
}

// A resident plan holds every scheme's layers and one window's tensors: its peak is the same at 4
// windows and at 32. It once grew with every window (jemalloc, purging off, would not split the
// ever larger freed extents its freed neighbours coalesced into: 244 MB at 4 windows, 433 MB at 32
// for this run; common/memory.cpp). Many rounding variants of block formats make the most varied
// allocation sizes.
TEST(CliScale, AResidentPlansMemoryDoesNotGrowWithTheWindows) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the sanitizer's allocator replaces the one whose setting this checks";
#endif
  test::TempDir dir;
  const auto peak_at = [&](int windows) {
    const std::string out = (dir / fmt::format("w{}.json", windows)).string();
    CommandResult r = qeval(test::kEval + fmt::format(" --seq-len 256 --max-windows {} --rounding-band 4 --plan resident "
                                                      "--schemes full,int8-moderate,fp8-e4m3,mxfp4,nvfp4,w4-zeropoint,mxfp6 --out {}",
                                                      windows, out));
    EXPECT_EQ(r.status, 0) << r.output;
    const nlohmann::json record = nlohmann::json::parse(read_file(out));
    EXPECT_EQ(record.at("window_hashes").size(), static_cast<std::size_t>(windows));
    return static_cast<double>(record.at("plan").at("measured_peak_rss_bytes").get<std::int64_t>());
  };
  const double four = peak_at(4), thirty_two = peak_at(32);
  EXPECT_LT(thirty_two, 1.25 * four) << fmt::format("peak RSS {:.0f} MB at 4 windows, {:.0f} MB at 32", four / 1e6, thirty_two / 1e6);
}

TEST(CliScale, EveryMemoryPlanGivesTheSameRecordAndTheRecordNamesIt) {
  test::TempDir dir;
  ASSERT_EQ(qeval(kSmallEval + " --plan resident --out " + (dir / "resident.json").string()).status, 0);
  CommandResult streamed = qeval(kSmallEval + " --plan streamed --chunk-windows 4 --batch-size 2 --out " + (dir / "streamed.json").string());
  ASSERT_EQ(streamed.status, 0) << streamed.output;
  ASSERT_EQ(qeval(kSmallEval + " --plan resident-weights --out " + (dir / "weights.json").string()).status, 0);
  EXPECT_EQ(results_of(dir / "streamed.json"), results_of(dir / "resident.json"));
  EXPECT_EQ(results_of(dir / "weights.json"), results_of(dir / "resident.json"));
  // The weights hash comes from each plan's own reads (loaders/checkpoints/weights_hash.h): one value.
  ASSERT_EQ(qeval(kSmallEval + " --plan streamed --chunk-windows 2 --threads 1 --out " + (dir / "one-thread.json").string()).status, 0);
  const auto model_of = [&](const char* name) { return nlohmann::json::parse(read_file(dir / name)).at("model"); };
  for (const char* name : {"streamed.json", "weights.json", "one-thread.json"})
    EXPECT_EQ(model_of(name).at("weights_hash"), model_of("resident.json").at("weights_hash")) << name;
  EXPECT_EQ(model_of("resident.json").at("weights_hash_kind"), "tensor-bytes-xxh3");
  const nlohmann::json record = nlohmann::json::parse(read_file(dir / "streamed.json"));
  EXPECT_EQ(record.at("plan").at("name"), "streamed");
  EXPECT_EQ(record.at("plan").at("chunk_windows"), 4);
  EXPECT_GT(record.at("plan").at("measured_peak_rss_bytes").get<std::int64_t>(), 0);
  EXPECT_GT(record.at("plan").at("estimated_peak_host_bytes").get<std::int64_t>(), 0);
  // A run resumed under another plan continues to the same bits.
  auto out = (dir / "mixed.json").string();
  ASSERT_EQ(qeval(kSmallEval + " --plan streamed --resume --stop-after 4 --out " + out).status, 3);
  ASSERT_EQ(qeval(kSmallEval + " --plan resident --resume --out " + out).status, 0);
  EXPECT_EQ(results_of(out), results_of(dir / "resident.json"));
  EXPECT_EQ(nlohmann::json::parse(read_file(out)).at("model").at("weights_hash"), model_of("resident.json").at("weights_hash"))
      << "hashed before the evaluation (a state file's identity needs it) or from its reads: one value";
}

TEST(CliScale, NoPlanThatFitsIsRefusedWithTheNumbersBeforeAnyWork) {
  test::TempDir dir;
  const auto out = dir / "r.json";
  CommandResult r = qeval(kSmallEval + " --max-memory 40M --out " + out.string());
  EXPECT_EQ(r.status, 2) << r.output;
  for (const char* part : {"no evaluation plan fits", "40.0 MiB available (--max-memory 40.0 MiB)", "resident needs ~",
                           "streamed needs ~", "no weight was read"})
    EXPECT_TRUE(contains(r.output, part)) << part << " in: " << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
  CommandResult forced = qeval(kSmallEval + " --plan resident --max-memory 100M --out " + out.string());
  EXPECT_EQ(forced.status, 2) << forced.output;
  EXPECT_TRUE(contains(forced.output, "--plan resident")) << forced.output;
  CommandResult bad = qeval(kSmallEval + " --max-memory lots --out " + out.string());
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_TRUE(contains(bad.output, "--max-memory 'lots'")) << bad.output;
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(CliScale, ThreadsAndBatchSizeDoNotChangeAnyBit) {
  test::TempDir dir;
  ASSERT_EQ(qeval(kSmallEval + " --threads 1 --batch-size 1 --out " + (dir / "a.json").string()).status, 0);
  ASSERT_EQ(qeval(kSmallEval + " --threads 2 --batch-size 8 --out " + (dir / "b.json").string()).status, 0);
  EXPECT_EQ(results_of(dir / "a.json"), results_of(dir / "b.json"));
}

}  // namespace
}  // namespace qeval
