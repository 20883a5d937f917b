// AWQ end to end on stories260K (issue 77 item 3): `qeval eval --schemes full,awq-w4-g128
// --calibration-windows 4` writes a record that verify_record accepts, with AWQ's account (each
// mapping's chosen point, v → o skipped for its grouped-query attention, the ragged last group of
// down's 172 inputs), and the edits a gate must catch in that account are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "records/record_verify.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using nlohmann::json;

json& scheme(json& record, const std::string& name) {
  for (auto& s : record.at("schemes"))
    if (s.at("name") == name) return s;
  throw std::runtime_error("no scheme " + name);
}

TEST(AwqRecord, StoriesRecordVerifiesWithEachMappingsAccount) {
  test::TempDir dir;
  const json record = test::stories_eval_record(
      dir, "awq",
      "--model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt --seq-len 64 "
      "--max-windows 4 --calibration-windows 4 --schemes full,w4-zeropoint-g128,awq-w4-g128");
  ASSERT_FALSE(record.is_null());
  ASSERT_NO_THROW(verify_record(record, "r.json"));

  json r = record;
  const json& awq = scheme(r, "awq-w4-g128")["description"]["calibrated_weights"];
  EXPECT_EQ(awq.at("method"), "awq");
  EXPECT_EQ(awq.at("windows"), 4);
  const json& mappings = awq.at("mappings");
  ASSERT_EQ(mappings.size(), 5u * 4);  // 5 layers, 4 mappings each, in order
  EXPECT_EQ(mappings[0].at("name"), "layers.0.attn_norm → attn.q, attn.k, attn.v");
  EXPECT_EQ(mappings[1].at("name"), "layers.0.attn.v → attn.o");
  EXPECT_EQ(mappings[3].at("name"), "layers.0.mlp.up → mlp.down");
  for (const json& m : mappings) {
    const std::string name = m.at("name");
    if (name.find("attn.v → attn.o") != std::string::npos) {
      EXPECT_NE(m.at("skipped").get<std::string>().find("grouped-query"), std::string::npos) << m.dump();
      continue;
    }
    EXPECT_LE(m.at("loss").get<double>(), m.at("initial_loss").get<double>()) << m.dump();
    EXPECT_EQ(m.at("tokens"), 4 * 64) << m.dump();
  }
  EXPECT_EQ(awq.at("layers").size(), 5u * 7);
  // The scheme quantised the same linears as round-to-nearest, and measured something else.
  const double ppl_awq = scheme(r, "awq-w4-g128").at("perplexity").at("ppl");
  const double ppl_rtn = scheme(r, "w4-zeropoint-g128").at("perplexity").at("ppl");
  EXPECT_TRUE(std::isfinite(ppl_awq));
  EXPECT_NE(ppl_awq, ppl_rtn);

  struct Edit {
    std::string what;
    std::function<void(json&)> apply;
    std::string message;
  };
  const std::vector<Edit> edits = {
      {"a negative AWQ loss", [](json& x) {
         scheme(x, "awq-w4-g128")["description"]["calibrated_weights"]["mappings"][0]["loss"] = -1.0;
       }, ".loss is -1"},
      {"a chosen loss above the first point's", [](json& x) {
         json& m = scheme(x, "awq-w4-g128")["description"]["calibrated_weights"]["mappings"][0];
         m["loss"] = m["initial_loss"].get<double>() * 2 + 1;
       }, "exceeds the first grid point's"},
      {"AWQ's account called GPTQ's", [](json& x) {
         scheme(x, "awq-w4-g128")["description"]["calibrated_weights"]["method"] = "gptq";
       }, "calibrated_weights.method is \"gptq\", the spec's is awq"},
      {"no mappings", [](json& x) {
         scheme(x, "awq-w4-g128")["description"]["calibrated_weights"].erase("mappings");
       }, "mappings should list"},
      {"AWQ calibration windows that are evaluated", [](json& x) {
         scheme(x, "awq-w4-g128")["description"]["calibrated_weights"]["calibration"]["windows"][0] = 1;
       }, "which the record also evaluates"},
      {"no account on the AWQ scheme", [](json& x) {
         scheme(x, "awq-w4-g128")["description"].erase("calibrated_weights");
       }, "has no \"calibrated_weights\""},
  };
  for (const Edit& e : edits) {
    SCOPED_TRACE(e.what);
    json x = record;
    e.apply(x);
    EXPECT_TRUE(test::throws_with([&] { verify_record(x, "r.json"); }, {"r.json: scheme", e.message}));
  }
}

}  // namespace
}  // namespace qeval
