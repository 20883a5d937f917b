// Scheme files as tests/hardening/probe.py's groups formats, kv and ggml write them (issue 63):
// every value of the wrong JSON type is refused naming the file and the key (never nlohmann's
// "type must be string, but is number" alone).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "quant/schemes/spec.h"
#include "tests/support/test_data.h"

#include <fstream>

namespace qeval {
namespace {

using test::throws_with;

SchemeSpec parse(const std::string& text) { return scheme_from_json(nlohmann::json::parse(text), "scheme file s.json"); }

TEST(SchemeHostile, EveryValueOfTheWrongTypeNamesItsKey) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"({"weights": {"kind": 3}})", {"weights: kind", "string", "3"}},
      {R"({"weights": {"kind": "fp8", "element": 3, "granularity": "channel"}})", {"weights: element", "e4m3, e5m2"}},
      {R"({"weights": {"kind": "mx", "element": null, "granularity": "block:32"}})", {"weights: element", "null"}},
      {R"({"weights": {"kind": "mx", "element": "e2m1", "granularity": 32}})", {"weights: granularity", "block:32"}},
      {R"({"weights": {"kind": "mx", "element": "e2m1", "granularity": "block:32", "scale_rounding": true}})",
       {"weights: scale_rounding", "floor, up", "true"}},
      {R"({"input_activations": {"kind": "fp8", "element": "e4m3", "granularity": "tensor",
           "calibration": {"windows": 2, "statistic": 99}}})",
       {"input_activations: calibration.statistic", "99"}},
      {R"({"name": 5})", {"s.json: name", "5"}},
      {R"({"description": ["x"]})", {"s.json: description"}},
      {R"({"quantize_lm_head": "yes"})", {"s.json: quantize_lm_head", "true or false", "\"yes\""}},
      {R"({"quantize_ssm_inner": 1})", {"s.json: quantize_ssm_inner", "true or false"}},
      {R"({"execution": 0})", {"s.json: execution", "auto, reference, kernel"}},
      {R"({"weights": {"kind": "ggml", "type": 8}})", {"weights: type", "8"}},
      {R"({"weights": {"kind": "ggml", "file_type": null}})", {"weights: file_type", "q4_k_m"}},
      {R"({"weights": {"kind": "ggml", "type": "q8_0", "activations": 8}})", {"weights: activations", "none"}},
      {R"({"weights": {"kind": "ggml", "type": "q8_0"}, "quantize_embedding": "yes"})",
       {"s.json: quantize_embedding", "true or false"}},
  };
  for (const auto& [text, parts] : cases) {
    const std::string& named = text;  // lambdas may not capture a structured binding (C++17)
    EXPECT_TRUE(throws_with([&named] { parse(named); }, {"scheme file s.json"})) << text;
    try {
      parse(text);
    } catch (const Error& e) {
      const std::string message = e.what();
      for (const auto& p : parts) EXPECT_NE(message.find(p), std::string::npos) << text << "\n" << message;
      EXPECT_EQ(message.find("type must be"), std::string::npos) << message;
    }
  }
}

// A key given twice in a scheme file was the last one silently (kv_cache int8 then q8_0: the run
// quantised a q8_0 cache); refused now, naming the key.
TEST(SchemeHostile, AKeyGivenTwiceIsRefused) {
  test::TempDir dir;
  const std::pair<const char*, const char*> files[] = {
      {R"({"name": "k", "kv_cache": {"format": "int8"}, "kv_cache": {"format": "q8_0"}})", "kv_cache"},
      {R"({"name": "k", "kv_cache": {"format": "int8", "format": "int4"}})", "format"},
      {R"({"name": "g", "weights": {"kind": "ggml", "file_type": "q8_0"}, "tensor_types": {"lm_head": "q8_0", "lm_head": "q4_0"}})",
       "lm_head"},
  };
  int i = 0;
  for (const auto& [text, key] : files) {
    const std::string path = (dir / ("s" + std::to_string(i++) + ".json")).string();
    std::ofstream(path) << text;
    EXPECT_TRUE(throws_with([&] { resolve_scheme(path); }, {path, key, "twice"})) << text;
  }
}

// "percentile:0x10" was read by std::stod as the 16th percentile; "bits" on kind ggml was read and
// ignored. Both are refused.
TEST(SchemeHostile, HexPercentilesAndBitsOnGgmlAreRefused) {
  EXPECT_TRUE(throws_with([] { parse(R"({"weights": {"kind": "fp8", "element": "e4m3", "granularity": "tensor"},
      "input_activations": {"kind": "fp8", "element": "e4m3", "granularity": "tensor",
      "calibration": {"windows": 2, "statistic": "percentile:0x10"}}})"); }, {"percentile:0x10", "(0, 100]"}));
  EXPECT_TRUE(throws_with([] { parse(R"({"weights": {"kind": "ggml", "file_type": "q4_k_m", "bits": 4}})"); },
                          {"weights", "unknown key 'bits'", "kind ggml"}));
}

// "percentile:4.9e-324" is a number in (0, 100] (the smallest subnormal): std::stod threw on it
// (ERANGE) and it was refused as "not a number in (0, 100]". It is read now; a value that
// underflows to 0 says so, and the other refusals keep naming the range.
TEST(SchemeHostile, SubnormalPercentileIsReadAndUnderflowIsNamed) {
  auto with_statistic = [](const std::string& statistic) {
    return R"({"weights": {"kind": "fp8", "element": "e4m3", "granularity": "tensor"},
      "input_activations": {"kind": "fp8", "element": "e4m3", "granularity": "tensor",
      "calibration": {"windows": 2, "statistic": ")" + statistic + R"("}}})";
  };
  const SchemeSpec subnormal = parse(with_statistic("percentile:4.9e-324"));
  ASSERT_TRUE(subnormal.input_activations.calibration.has_value());
  EXPECT_EQ(subnormal.input_activations.calibration->percentile, 4.9e-324);
  EXPECT_GT(subnormal.input_activations.calibration->percentile, 0.0);
  EXPECT_EQ(parse(with_statistic("percentile:99.9")).input_activations.calibration->percentile, 99.9);
  EXPECT_TRUE(throws_with([&] { parse(with_statistic("percentile:1e-400")); },
                          {"calibration.statistic", "1e-400", "below the smallest positive double", "(0, 100]"}));
  EXPECT_TRUE(throws_with([&] { parse(with_statistic("percentile:0")); }, {"(0, 100]", "found 0"}));
  EXPECT_TRUE(throws_with([&] { parse(with_statistic("percentile:1e400")); }, {"(0, 100]", "found 1e400"}));
  EXPECT_TRUE(throws_with([&] { parse(with_statistic("percentile:5x")); }, {"'5x' is not a decimal number", "(0, 100]"}));
}

// A scheme named like a rounding variant ("int8-coarse~r1") gave a record whose row compare read as
// int8-coarse's variant without a band: the form is the variants' alone, by "name" or by file name.
TEST(SchemeHostile, ARoundingVariantsNameFormIsRefused) {
  EXPECT_TRUE(throws_with([] { parse(R"({"name": "int8-coarse~r1", "weights": {"kind": "int8_absmax", "granularity": "tensor"}})"); },
                          {"s.json: \"name\" is \"int8-coarse~r1\"", "~r<seed>", "rounding variant", "--rounding-band"}));
  EXPECT_TRUE(is_rounding_variant_form("mine~r12"));
  for (const char* allowed : {"mine~r", "mine~rx", "mine~r1x", "~r1", "mine~q1", "mine-r1"}) {
    EXPECT_FALSE(is_rounding_variant_form(allowed)) << allowed;
  }
  EXPECT_EQ(parse(R"({"name": "mine~rx", "weights": {"kind": "int8_absmax", "granularity": "tensor"}})").name, "mine~rx");
  test::TempDir dir;
  const std::string path = (dir / "int8-coarse~r3.json").string();
  std::ofstream(path) << R"({"weights": {"kind": "int8_absmax", "granularity": "tensor"}})";
  EXPECT_TRUE(throws_with([&] { resolve_scheme(path); }, {path, "named after its file", "\"int8-coarse~r3\"", "add a \"name\""}));
}

}  // namespace
}  // namespace qeval
