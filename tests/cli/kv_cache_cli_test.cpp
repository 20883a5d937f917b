// Quantised KV caches (issue 62) end to end on stories260K: KV-only schemes and a W8A8 + int8 KV
// scheme evaluate in one pass beside full precision, with statistics (those of the attention that
// read the quantised cache) and a rounding band; the record carries each layer's K and V error,
// first position apart; bad kv_cache specs and a q4_0 cache on stories260K's head_dim of 8 are
// refused naming the key or the layer.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
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

const std::string kData = " --data-dir " + test::data_dir().string() +
                          " --model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt "
                          "--seq-len 128 --max-windows 6";

const json& scheme(const json& record, const std::string& name) {
  for (const auto& s : record.at("schemes"))
    if (s.at("name") == name) return s;
  ADD_FAILURE() << "no scheme " << name;
  static const json none;
  return none;
}

TEST(KvCacheCli, KvSchemesEvaluateInOnePassWithStatisticsErrorsAndABand) {
  test::TempDir dir;
  const std::string out = (dir / "kv.json").string();
  const CommandResult r = test::run_qeval(test::kEval + kData +
                                          " --schemes full,kv-int8,kv-int4,kv-int4-keep1,w8a8-kv8 --stats-for all "
                                          "--rounding-band 1 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const json record = json::parse(read_file(out));
  const double full_share =
      scheme(record, "full").at("statistics").at("attention").at("first_token_share").get<double>();
  for (const char* name : {"kv-int8", "kv-int4", "kv-int4-keep1", "w8a8-kv8"}) {
    SCOPED_TRACE(name);
    const json& s = scheme(record, name);
    const json& d = s.at("description");
    EXPECT_NE(s.at("vs_full").at("paired_dnll_mean").get<double>(), 0.0);
    EXPECT_TRUE(s.contains("rounding_band"));
    ASSERT_FALSE(s.at("statistics").is_null());
    ASSERT_TRUE(d.contains("kv_cache_error"));
    const json& layers = d.at("kv_cache_error").at("layers");
    ASSERT_EQ(layers.size(), 5u);  // every layer of stories260K
    for (const auto& l : layers) {
      EXPECT_EQ(l.at("windows"), 6);
      EXPECT_GT(l.at("k_rest").get<double>(), 0.0);
      EXPECT_GT(l.at("v_rest").get<double>(), 0.0);
    }
    const bool keep1 = std::string(name).find("keep1") != std::string::npos;
    EXPECT_EQ(layers[0].at("k_first").get<double>() == 0.0, keep1);
    EXPECT_EQ(d.at("scheme").contains("kv_cache"), true);
  }
  EXPECT_EQ(scheme(record, "kv-int4").at("description").at("execution"), "kv cache only (every linear in full precision)");
  EXPECT_GT(scheme(record, "w8a8-kv8").at("description").at("quantized_layers").get<int>(), 0);
  // The statistics come from the attention that read the 4-bit cache: its first-token share moved.
  EXPECT_NE(scheme(record, "kv-int4").at("statistics").at("attention").at("first_token_share").get<double>(),
            full_share);
  // A 4-bit cache costs more than an 8-bit one.
  EXPECT_GT(scheme(record, "kv-int4").at("vs_full").at("paired_dnll_mean").get<double>(),
            std::fabs(scheme(record, "kv-int8").at("vs_full").at("paired_dnll_mean").get<double>()));
  EXPECT_FALSE(scheme(record, "full").at("description").at("scheme").contains("kv_cache"));
  // compare groups them: the cache alone, and a cache beside int8 linears.
  const CommandResult c = test::run_qeval("compare " + out);
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_TRUE(contains(c.output, "| KV cache | stories260K | kv-int4-keep1 |")) << c.output;
  EXPECT_TRUE(contains(c.output, "| int8 + KV cache | stories260K | w8a8-kv8 |")) << c.output;
}

TEST(KvCacheCli, BadKvCacheSpecsAreRefusedNamingTheKeyOrTheLayer) {
  const CommandResult q4 = test::run_qeval(test::kEval + kData + " --schemes full,kv-q4_0");
  EXPECT_NE(q4.status, 0);
  EXPECT_TRUE(contains(q4.output, "kv-q4_0") && contains(q4.output, "layer 0") && contains(q4.output, "head_dim 8"))
      << q4.output;
  test::TempDir dir;
  const std::pair<const char*, std::vector<std::string>> cases[] = {
      {R"({"kv_cache": {"format": "int3"}})", {"kv_cache.format", "int3", "q8_0"}},
      {R"({"kv_cache": {"format": "int4", "group_size": 0}})", {"kv_cache.group_size", "0"}},
      {R"({"kv_cache": {"format": "int8", "keep_tokens": {"first": -1}}})", {"kv_cache.keep_tokens.first", "-1"}},
      // Keeping the whole window (--seq-len 128) would quantise nothing: refused, not run as full.
      {R"({"kv_cache": {"format": "int8", "keep_tokens": {"first": 128}}})",
       {"kv_cache.keep_tokens.first 128", "every position of a 128-token window"}},
  };
  int i = 0;
  for (const auto& [text, parts] : cases) {
    const std::string path = (dir / ("bad" + std::to_string(i++) + ".json")).string();
    std::ofstream(path) << text;
    const CommandResult r = test::run_qeval(test::kEval + kData + " --schemes full," + path);
    EXPECT_NE(r.status, 0) << text;
    for (const auto& p : parts) EXPECT_TRUE(contains(r.output, p)) << text << "\n" << r.output;
  }
}

}  // namespace
}  // namespace qeval
