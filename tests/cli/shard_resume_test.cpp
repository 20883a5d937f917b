// Shards and resumed runs carry every per-window quantity (issue 79): every KV-cache, every
// static-scale and every calibrated (GPTQ, AWQ) preset, evaluated in two shards then merged, and
// stopped after some windows then resumed, gives the one-process record bit for bit (timings and
// provenance aside). The KV presets run on a llama2.c model with head_dim 64 written here (q8_0,
// q4_0 and the Hadamard rotation need head_dim a multiple of 32 or 64; stories260K's is 8), the
// static and calibrated ones on stories260K; all with statistics and a rounding band, whose
// variants measure their own KV error. merge's refusal of shards of different evaluations names
// the key that differs and both values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/files.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using nlohmann::json;
using test::CommandResult;
using test::contains;

const char* const kKvPresets = "kv-int8,kv-fp8,kv-q8_0,kv-q4_0,kv-int4,kv-q4_0-keep1,kv-int4-keep1,w8a8-kv8,"
                               "kv-q8_0-hadamard,kv-q4_0-hadamard";
const char* const kStaticPresets = "int8-moderate-static,fp8-e4m3-static,fp8-e4m3-static-keep1";

// A llama2.c checkpoint (legacy header, shared classifier) with stories260K's vocabulary of 512,
// one head of 64 channels, 2 layers; weights from a fixed linear congruential sequence.
std::string llama2c_head_dim_64() {
  const std::int32_t D = 64, F = 96, L = 2, H = 1, KV = 1, V = 512, S = 128, hd = D / H;
  std::string out;
  auto put = [&out](const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); };
  const std::int32_t header[7] = {D, F, L, H, KV, V, S};
  put(header, sizeof header);
  std::uint64_t state = 79;
  auto tensor = [&](std::int64_t n, std::int64_t fan_in) {  // uniform with standard deviation 1/sqrt(fan_in)
    const float a = std::sqrt(3.0f / static_cast<float>(fan_in));
    for (std::int64_t i = 0; i < n; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const float u = static_cast<float>(state >> 40) / static_cast<float>(1ULL << 24);  // [0, 1)
      const float v = (2 * u - 1) * a;
      put(&v, sizeof v);
    }
  };
  auto ones = [&](std::int64_t n) {
    const float one = 1.0f;
    for (std::int64_t i = 0; i < n; ++i) put(&one, sizeof one);
  };
  tensor(std::int64_t{V} * D, 1);          // token embedding
  ones(std::int64_t{L} * D);               // rms_att
  tensor(std::int64_t{L} * D * D, D);      // wq
  tensor(std::int64_t{L} * KV * hd * D, D);  // wk
  tensor(std::int64_t{L} * KV * hd * D, D);  // wv
  tensor(std::int64_t{L} * D * D, D);      // wo
  ones(std::int64_t{L} * D);               // rms_ffn
  tensor(std::int64_t{L} * F * D, D);      // w1
  tensor(std::int64_t{L} * D * F, F);      // w2
  tensor(std::int64_t{L} * F * D, D);      // w3
  ones(D);                                 // rms_final
  tensor(std::int64_t{S} * hd, 1);         // freq_cis_real, freq_cis_imag (qeval computes its own)
  return out;
}

// The record without what differs by process: when and where it ran, how long it took (in all and
// per scheme), its plan's measured memory, and which shard or merge wrote it.
json without_provenance(json record) {
  for (const char* key : {"created", "command", "host", "timing", "timings", "plan", "qeval"}) record.erase(key);
  for (const char* key : {"shard", "merged_from_shards"}) record["options"].erase(key);
  for (json& scheme : record["schemes"]) scheme.erase("timing");  // forward seconds, tokens per second
  return record;
}

// The paths where two records differ (JSON patch paths), for a failure that names them.
std::string differences(const json& a, const json& b) {
  std::string out;
  for (const auto& op : json::diff(a, b)) {
    out += op.at("op").get<std::string>() + " " + op.at("path").get<std::string>() + "\n";
    if (out.size() > 2000) break;
  }
  return out;
}

json read_json(const std::string& path) { return json::parse(read_file(path)); }

void expect_shards_and_resume_give_the_one_process_record(const std::string& eval, const std::string& what) {
  SCOPED_TRACE(what);
  test::TempDir dir;
  auto path = [&](const std::string& n) { return (dir / n).string(); };
  const CommandResult one = test::run_qeval(eval + " --out " + path("one.json"));
  ASSERT_EQ(one.status, 0) << one.output;
  const json expected = without_provenance(read_json(path("one.json")));

  for (const char* shard : {"0/2", "1/2"}) {
    const CommandResult r = test::run_qeval(eval + " --shard " + shard + " --out " + path(std::string("s") + shard[0] + ".json"));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  const CommandResult merged = test::run_qeval("merge " + path("s1.json") + " " + path("s0.json") + " --out " + path("merged.json"));
  ASSERT_EQ(merged.status, 0) << merged.output;
  const json from_shards = without_provenance(read_json(path("merged.json")));
  EXPECT_EQ(from_shards, expected) << "the merged shards differ from the one-process record at:\n"
                                   << differences(expected, from_shards);

  // A controlled stop after 2 of the 6 windows stands in for a kill (its state file survives); a
  // resumed shard too, merged with the other.
  ASSERT_EQ(test::run_qeval(eval + " --resume --stop-after 2 --out " + path("resumed.json")).status, 3);
  const CommandResult resumed = test::run_qeval(eval + " --resume --out " + path("resumed.json"));
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  ASSERT_TRUE(contains(resumed.output, "2 windows already done")) << resumed.output;
  const json from_resume = without_provenance(read_json(path("resumed.json")));
  EXPECT_EQ(from_resume, expected) << "the resumed record differs from the one-process record at:\n"
                                   << differences(expected, from_resume);
  ASSERT_EQ(test::run_qeval(eval + " --shard 1/2 --resume --stop-after 1 --out " + path("r1.json")).status, 3);
  const CommandResult resumed_shard = test::run_qeval(eval + " --shard 1/2 --resume --out " + path("r1.json"));
  ASSERT_EQ(resumed_shard.status, 0) << resumed_shard.output;
  const CommandResult merged_resumed =
      test::run_qeval("merge " + path("s0.json") + " " + path("r1.json") + " --out " + path("merged-resumed.json"));
  ASSERT_EQ(merged_resumed.status, 0) << merged_resumed.output;
  const json from_both = without_provenance(read_json(path("merged-resumed.json")));
  EXPECT_EQ(from_both, expected) << "a resumed shard merged differs from the one-process record at:\n"
                                 << differences(expected, from_both);
}

TEST(ShardResume, EveryKvPresetShardedAndResumedGivesTheOneProcessRecord) {
  test::TempDir models;
  test::write_bytes(models / "hd64.bin", llama2c_head_dim_64());
  const std::string eval = test::kEval + " --data-dir " + test::data_dir().string() + " --model " +
                           (models / "hd64.bin").string() +
                           " --data text/tinystories/validation-head.txt --seq-len 64 --max-windows 6 --batch-size 2"
                           " --stats-for all --rounding-band 1 --schemes full," + kKvPresets;
  expect_shards_and_resume_give_the_one_process_record(eval, "KV presets, head_dim 64");
}

TEST(ShardResume, EveryStaticPresetShardedAndResumedGivesTheOneProcessRecord) {
  const std::string eval = test::kEval + " --data-dir " + test::data_dir().string() +
                           " --model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt"
                           " --seq-len 128 --max-windows 6 --batch-size 2 --stats-for all --rounding-band 1"
                           " --schemes full,kv-int8,kv-int4-keep1," + std::string(kStaticPresets);
  expect_shards_and_resume_give_the_one_process_record(eval, "static presets and KV presets on stories260K");
}

// The calibrated presets (issue 77): each process calibrates from the same windows of the
// calibration data, whichever shard or resumed part of the evaluation it runs, so the codes, the
// record's calibration sections (windows, Hessian sharing, AWQ's scales) and every score are the
// one-process record's. Each preset runs as itself but for 8 calibration windows instead of 128
// (the presets' 128 cost minutes here, the same code at 16 times the work).
TEST(ShardResume, EveryCalibratedPresetShardedAndResumedGivesTheOneProcessRecord) {
  test::TempDir dir;
  std::string schemes = "full";
  for (const std::string& preset : preset_names()) {
    SchemeSpec spec = preset_scheme(preset);
    if (!spec.weights.gptq && !spec.weights.awq) continue;
    if (spec.weights.gptq) spec.weights.gptq->windows = 8;
    if (spec.weights.awq) spec.weights.awq->windows = 8;
    spec.name = preset + "-cal8";
    const std::string path = (dir / (spec.name + ".json")).string();
    test::write_bytes(path, scheme_to_json(spec).dump());
    schemes += "," + path;
  }
  ASSERT_NE(schemes.find("gptq-w4-g128-cal8"), std::string::npos);
  ASSERT_NE(schemes.find("awq-w4-g128-cal8"), std::string::npos);
  const std::string eval = test::kEval + " --data-dir " + test::data_dir().string() +
                           " --model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt"
                           " --seq-len 128 --max-windows 6 --batch-size 2 --stats-for all --rounding-band 1"
                           " --calibration-data text/tinyshakespeare/input.txt --calibration-seq-len 32 --schemes " +
                           schemes;
  expect_shards_and_resume_give_the_one_process_record(eval, "GPTQ and AWQ presets on stories260K");
}

// Shards of two evaluations: merge names the key that differs and both values.
TEST(ShardResume, MergeOfShardsOfDifferentEvaluationsNamesTheKeyAndBothValues) {
  test::TempDir dir;
  const std::string eval = test::kEval + " --data-dir " + test::data_dir().string() +
                           " --model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt"
                           " --max-windows 4 --schemes full,kv-int8";
  ASSERT_EQ(test::run_qeval(eval + " --seq-len 64 --shard 0/2 --out " + (dir / "a.json").string()).status, 0);
  ASSERT_EQ(test::run_qeval(eval + " --seq-len 96 --shard 1/2 --out " + (dir / "b.json").string()).status, 0);
  const CommandResult r = test::run_qeval("merge " + (dir / "a.json").string() + " " + (dir / "b.json").string() +
                                          " --out " + (dir / "m.json").string());
  EXPECT_EQ(r.status, 2) << r.output;
  for (const char* part : {"b.json evaluated something else than", "protocol.seq_len: 64 vs 96"})
    EXPECT_TRUE(contains(r.output, part)) << part << " in: " << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "m.json"));
}

}  // namespace
}  // namespace qeval
