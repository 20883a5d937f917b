// Messages (issue 63): a folder name or GGUF string that is not UTF-8 is shown escaped and never
// ends a run; --resume names the keys that differ, not two whole configurations; an unknown
// command is named; JSON values of the wrong type name the file and the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/files.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTiny = test::kEval + " --seq-len 32 --max-windows 2 --schemes full,int8-coarse --no-attention-stats";

TEST(Messages, UnknownCommandIsNamed) {
  const test::CommandResult r = test::run_qeval("evl --out x.json");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "unknown command \"evl\"")) << r.output;
  EXPECT_TRUE(test::contains(r.output, "eval")) << r.output;
}

TEST(Messages, FolderNameThatIsNotUtf8IsEscapedInTheRecord) {
  test::TempDir dir;
  const fs::path folder = dir / "caf\xe9";
  fs::create_directories(folder);
  fs::copy_file(test::data_path("models/stories260K/stories260K.bin"), folder / "stories260K.bin");
  const std::string out = (dir / "r.json").string();
  const test::CommandResult r =
      test::run_qeval(kTiny + " --model '" + (folder / "stories260K.bin").string() + "' --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const json record = json::parse(read_file(out));
  EXPECT_TRUE(test::contains(record.at("model").at("path").get<std::string>(), "caf\\xe9")) << record.at("model").dump();
}

TEST(Messages, GgufStringThatIsNotUtf8IsEscaped) {
  test::TempDir dir;
  test::GgufBuilder b;
  b.string("general.architecture", "llama");
  b.string("general.name", "caf\xe9 \xff model");
  b.u32("llama.embedding_length", 8);
  b.u32("llama.feed_forward_length", 12);
  b.u32("llama.block_count", 1);
  b.u32("llama.attention.head_count", 2);
  b.u32("llama.attention.head_count_kv", 1);
  b.u32("llama.context_length", 16);
  b.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  const std::int64_t D = 8, F = 12, V = 6;
  auto t = [&](const std::string& name, std::vector<std::int64_t> shape) { b.tensor(name, at::zeros(shape), 0); };
  t("token_embd.weight", {V, D});
  t("blk.0.attn_norm.weight", {D});
  t("blk.0.attn_q.weight", {D, D});
  t("blk.0.attn_k.weight", {4, D});
  t("blk.0.attn_v.weight", {4, D});
  t("blk.0.attn_output.weight", {D, D});
  t("blk.0.ffn_norm.weight", {D});
  t("blk.0.ffn_gate.weight", {F, D});
  t("blk.0.ffn_up.weight", {F, D});
  t("blk.0.ffn_down.weight", {D, F});
  t("output_norm.weight", {D});
  const fs::path gguf = dir / "caf\xe9.gguf";
  test::write_bytes(gguf, b.build());
  const test::CommandResult r = test::run_qeval("inspect --json '" + gguf.string() + "'");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(test::contains(r.output, "caf\\\\xe9")) << r.output;  // a backslash in JSON text is written twice
  EXPECT_FALSE(test::contains(r.output, "invalid UTF-8")) << r.output;
}

TEST(Messages, ResumeNamesTheKeyThatDiffers) {
  test::TempDir dir;
  const std::string out = (dir / "r.json").string();
  const test::CommandResult first = test::run_qeval(kTiny + " --resume --stop-after 1 --out " + out);
  ASSERT_EQ(first.status, 3) << first.output;
  const test::CommandResult again = test::run_qeval(kTiny + " --seq-len 16 --resume --out " + out);
  EXPECT_EQ(again.status, 2) << again.output;
  EXPECT_TRUE(test::contains(again.output, "protocol.seq_len: 32 vs 16")) << again.output;
  EXPECT_LT(again.output.size(), 600u) << again.output;
}

TEST(Messages, NameTooLongIsRefusedUpFrontNamingTheOption) {
  // Before: the whole evaluation ran, then "cannot write ./.aaa….tmp…: File name too long".
  test::TempDir dir;
  const std::string out = (dir / (std::string(300, 'a') + ".json")).string();
  const test::CommandResult r = test::run_qeval(kTiny + " --out " + out);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "qeval: error: --out ")) << r.output;
  EXPECT_TRUE(test::contains(r.output, "longer than the 255")) << r.output;
  EXPECT_FALSE(test::contains(r.output, "scored")) << "the evaluation ran first:\n" << r.output;
}

TEST(Messages, FilesystemErrorNamesTheOptionAndShortensThePath) {
  const test::CommandResult r = test::run_qeval(kTiny + " --model " + std::string(300, 'm') + ".bin");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "qeval: error: --model mmm")) << r.output;
  EXPECT_TRUE(test::contains(r.output, "File name too long")) << r.output;
  EXPECT_FALSE(test::contains(r.output, "filesystem error")) << r.output;
  EXPECT_FALSE(test::contains(r.output, std::string(300, 'm'))) << "the path is not shortened: " << r.output;
}

TEST(Messages, FigureDataOfTheWrongTypeNamesTheFileAndTheKeyPath) {
  test::TempDir dir;
  const std::string record = (dir / "r.json").string(), figures = (dir / "figures").string();
  const test::CommandResult made = test::run_qeval(kTiny + " --schemes full --plots " + figures + " --out " + record);
  ASSERT_EQ(made.status, 0) << made.output;
  json fd = json::parse(read_file(dir / "figures" / "figure_data.json"));
  fd["hidden_abs"]["first"][1] = "x";
  test::write_bytes(dir / "bad.json", fd.dump());
  const test::CommandResult r = test::run_qeval("plot " + record + " --figure-data " + (dir / "bad.json").string() +
                                                " --out " + (dir / "again").string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "--figure-data " + (dir / "bad.json").string())) << r.output;
  EXPECT_TRUE(test::contains(r.output, "hidden_abs.first[1]")) << r.output;
  EXPECT_FALSE(test::contains(r.output, "cannot use at()")) << r.output;
}

TEST(Messages, RecordValueOfTheWrongTypeNamesTheFileAndTheKey) {
  // Before: "type must be string, but is number", with no file (data, precision) or no key (protocol.name).
  test::TempDir dir;
  const std::string record = (dir / "r.json").string();
  const test::CommandResult made = test::run_qeval(kTiny + " --out " + record);
  ASSERT_EQ(made.status, 0) << made.output;
  const json good = json::parse(read_file(record));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"protocol", "name"}, "edited.json: protocol: \"name\" is 5: expected a string"},
      {{"data", "json_field"}, "data.json_field: \"text\" vs 5"},
      {{"precision", "device"}, "precision.device: \"cpu\" vs 5"}};
  for (const auto& [path, fragment] : cases) {
    json edited = good;
    edited[path[0]][path[1]] = 5;
    test::write_bytes(dir / "edited.json", edited.dump());
    const test::CommandResult r = test::run_qeval("compare " + record + " " + (dir / "edited.json").string());
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(test::contains(r.output, fragment)) << r.output;
    EXPECT_FALSE(test::contains(r.output, "type must be")) << r.output;
  }
}

}  // namespace
}  // namespace qeval
