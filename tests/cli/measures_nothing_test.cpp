// Options that measure nothing are refused, with the reason (issue 79): linears' keep_tokens that keep
// every position of the window (the KV cache's keep already was), a scheme whose include / exclude
// or tensor_types leave no linear to quantise, --quantize-lm-head when no scheme quantises a linear,
// --quantize-ssm-inner on a model without Mamba layers, and a scheme file that takes a preset's name
// with another spec. Each message names the file, the key and what was expected and found, and no
// record is written; a scheme file that is its preset word for word is still accepted.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using test::CommandResult;
using test::contains;

const std::string kData = " --data-dir " + test::data_dir().string() +
                          " --model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt "
                          "--seq-len 64 --max-windows 2";

struct Case {
  std::string name;
  std::string scheme_json;  // written to <name>.json and given as a scheme; empty: none
  std::string schemes;      // --schemes, "{file}" replaced by the file's path
  std::string options;
  std::vector<std::string> fragments;  // the message must hold each ("{file}": the file's path)
};

std::string replaced(std::string s, const std::string& file) {
  for (std::size_t at = s.find("{file}"); at != std::string::npos; at = s.find("{file}", at + file.size()))
    s.replace(at, 6, file);
  return s;
}

TEST(MeasuresNothing, OptionsThatMeasureNothingAreRefusedWithTheReason) {
  const std::vector<Case> cases = {
      // W4A4 with every position of the 64-token window kept: full precision bit for bit.
      {"keep-all",
       R"({"name": "mxfp4-keep-all", "weights": {"kind": "mx", "element": "e2m1", "granularity": "block:32"},
           "input_activations": {"kind": "mx", "element": "e2m1", "granularity": "block:32"},
           "keep_tokens": {"first": 64}})",
       "full,{file}", "",
       {"{file}", "mxfp4-keep-all", "keep_tokens.first 64", "keeps every position of a 64-token window",
        "keep fewer than 64 positions"}},
      {"keep-more",
       R"({"name": "int8-keep-more", "weights": {"kind": "int8_absmax", "granularity": "tensor"},
           "input_activations": {"kind": "int8_absmax", "granularity": "tensor"}, "keep_first_tokens": 100})",
       "full,{file}", "", {"{file}", "int8-keep-more", "keep_tokens.first 100", "keeps every position of a 64-token window"}},
      // Every tensor left in f32 by tensor_types, every linear excluded.
      {"all-f32", R"({"name": "q4-all-f32", "weights": {"kind": "ggml", "file_type": "q4_0"}, "tensor_types": {"*": "f32"}})",
       "full,{file}", "", {"{file}", "q4-all-f32", "tensor_types", "no linear", "35 linears"}},
      {"exclude-all",
       R"({"name": "fp8-none", "weights": {"kind": "fp8", "element": "e4m3", "granularity": "channel"},
           "input_activations": {"kind": "fp8", "element": "e4m3", "granularity": "token"}, "exclude": ["*"]})",
       "full,{file}", "", {"{file}", "fp8-none", "exclude", "no linear", "35 linears"}},
      // Options with nothing to act on.
      {"lm-head-kv-only", "", "full,kv-int8", " --quantize-lm-head",
       {"--quantize-lm-head", "kv-int8", "no scheme quantises a linear"}},
      {"ssm-inner-no-mamba", "", "full,int8-moderate", " --quantize-ssm-inner",
       {"--quantize-ssm-inner", "stories260K.bin", "no Mamba"}},
      // A scheme file that takes a preset's name with another spec.
      {"fake-mxfp4",
       R"({"name": "mxfp4", "weights": {"kind": "fp8", "element": "e4m3", "granularity": "channel"},
           "input_activations": {"kind": "fp8", "element": "e4m3", "granularity": "token"}})",
       "full,{file}", "", {"{file}", "\"name\" is \"mxfp4\"", "the preset mxfp4",
        "input_activations.kind: \"fp8\" vs \"mx\""}},
  };
  test::TempDir dir;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string file = (dir / (c.name + ".json")).string();
    if (!c.scheme_json.empty()) std::ofstream(file) << c.scheme_json;
    const std::string out = (dir / (c.name + "-record.json")).string();
    const CommandResult r =
        test::run_qeval(test::kEval + kData + " --schemes " + replaced(c.schemes, file) + c.options + " --out " + out);
    EXPECT_EQ(r.status, 2) << r.output;
    for (const std::string& fragment : c.fragments)
      EXPECT_TRUE(contains(r.output, replaced(fragment, file))) << replaced(fragment, file) << " in: " << r.output;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

// The refusals above stop only what measures nothing: a preset's own text under its name, a keep
// shorter than the window, a partial exclude and lm-head with a scheme that quantises linears run.
TEST(MeasuresNothing, TheCasesBesideThemStillRun) {
  test::TempDir dir;
  {
    std::ifstream in(test::repo_path("configs/schemes/mxfp4.json"));
    std::ofstream(dir / "mxfp4-copy.json") << in.rdbuf();
  }
  std::ofstream(dir / "keep63.json")
      << R"({"name": "int8-keep63", "weights": {"kind": "int8_absmax", "granularity": "tensor"},
            "input_activations": {"kind": "int8_absmax", "granularity": "tensor"}, "keep_tokens": {"first": 63}})";
  std::ofstream(dir / "exclude-some.json")
      << R"({"name": "fp8-some", "weights": {"kind": "fp8", "element": "e4m3", "granularity": "channel"},
            "input_activations": {"kind": "fp8", "element": "e4m3", "granularity": "token"}, "exclude": ["layers.0.*"]})";
  const CommandResult r = test::run_qeval(test::kEval + kData + " --quantize-lm-head --schemes full," +
                                          (dir / "mxfp4-copy.json").string() + "," + (dir / "keep63.json").string() + "," +
                                          (dir / "exclude-some.json").string() + ",kv-int8");
  EXPECT_EQ(r.status, 0) << r.output;
}

}  // namespace
}  // namespace qeval
