// The sections schemes add to a record's description, verified (records/scheme_sections_verify.h):
// a record qeval wrote on stories260K with a static, a KV-cache, two llama.cpp and a GPTQ scheme
// passes, and each edit an attacker of a CI gate could make to those sections — a scale that is not
// its amax's, calibration windows (static scales' or GPTQ's) that overlap the evaluated ones, GPTQ's
// account missing, on the wrong scheme or with a negative loss, KV errors out of their domain or on a
// scheme without a cache, a ggml type the rows or the rules do not allow, a preset's spec edited or
// two presets' names swapped, zero or negative byte counts — is refused naming the scheme and key.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
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

json& layer_named(json& layers, const std::string& name) {
  for (auto& l : layers)
    if (l.at("name") == name) return l;
  throw std::runtime_error("no layer " + name);
}

struct Edit {
  std::string what;
  std::function<void(json&)> apply;
  std::string message;  // a part of the refusal
};

TEST(RecordSections, EveryEditOfASchemeSectionIsRefusedNamingTheKey) {
  test::TempDir dir;
  const json record = test::stories_eval_record(
      dir, "sections",
      "--model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt --seq-len 64 "
      "--max-windows 4 --schemes full,int8-moderate-static,kv-int4-keep1,gguf-q8_0,gguf-q4_k_m,gptq-w4-g128");
  ASSERT_FALSE(record.is_null());
  ASSERT_NO_THROW(verify_record(record, "r.json"));

  const std::string q = "layers.0.attn.q";
  const std::vector<Edit> edits = {
      {"a static scale that is not its amax's", [&](json& r) {
         json& l = scheme(r, "int8-moderate-static")["description"]["static_scales"]["layers"][0];
         l["scale"] = l["scale"].get<double>() * 1.001;
       }, "static_scales.layers[\"layers.0.attn.q\"].scale is"},
      {"a negative amax", [&](json& r) {
         scheme(r, "int8-moderate-static")["description"]["static_scales"]["layers"][0]["amax"] = -1.0;
       }, ".amax is -1"},
      {"an amax as a string", [&](json& r) {
         scheme(r, "int8-moderate-static")["description"]["static_scales"]["layers"][0]["amax"] = "1.5";
       }, "expected a finite number"},
      {"calibration windows that are evaluated", [&](json& r) {
         scheme(r, "int8-moderate-static")["description"]["static_scales"]["calibration"]["windows"][0] = 1;
       }, "which the record also evaluates"},
      {"static scales on a dynamic scheme", [&](json& r) {
         scheme(r, "gguf-q8_0")["description"]["static_scales"] =
             scheme(r, "int8-moderate-static")["description"]["static_scales"];
       }, "scheme \"gguf-q8_0\": has \"static_scales\""},
      {"no static scales on a static scheme", [&](json& r) {
         scheme(r, "int8-moderate-static")["description"].erase("static_scales");
       }, "has no \"static_scales\""},
      {"GPTQ calibration windows that are evaluated", [&](json& r) {
         scheme(r, "gptq-w4-g128")["description"]["calibrated_weights"]["calibration"]["windows"][5] = 2;
       }, "calibrated_weights.calibration.windows holds window 2"},
      {"fewer GPTQ calibration windows than the spec's", [&](json& r) {
         scheme(r, "gptq-w4-g128")["description"]["calibrated_weights"]["windows"] = 8;
       }, "calibrated_weights.windows is 8, the spec calibrates on 128"},
      {"a negative GPTQ loss", [&](json& r) {
         scheme(r, "gptq-w4-g128")["description"]["calibrated_weights"]["layers"][3]["loss"] = -2.0;
       }, ".loss is -2"},
      {"GPTQ's solves on a round-to-nearest scheme", [&](json& r) {
         scheme(r, "gguf-q8_0")["description"]["calibrated_weights"] =
             scheme(r, "gptq-w4-g128")["description"]["calibrated_weights"];
       }, "scheme \"gguf-q8_0\": has \"calibrated_weights\""},
      {"no solves on a GPTQ scheme", [&](json& r) {
         scheme(r, "gptq-w4-g128")["description"].erase("calibrated_weights");
       }, "has no \"calibrated_weights\""},
      {"a negative KV error", [&](json& r) {
         scheme(r, "kv-int4-keep1")["description"]["kv_cache_error"]["layers"][1]["k_rest"] = -0.1;
       }, "k_rest is -0.1"},
      {"a KV error of 1e300", [&](json& r) {
         scheme(r, "kv-int4-keep1")["description"]["kv_cache_error"]["layers"][1]["v_rest"] = 1e300;
       }, "a relative RMS error lies in"},
      {"more KV windows than the record", [&](json& r) {
         scheme(r, "kv-int4-keep1")["description"]["kv_cache_error"]["layers"][0]["windows"] = 99;
       }, "but the record evaluates 4 windows"},
      {"an error at a kept position", [&](json& r) {
         scheme(r, "kv-int4-keep1")["description"]["kv_cache_error"]["layers"][2]["k_first"] = 0.01;
       }, "keeps position 0 in full precision"},
      {"a layer the model does not have", [&](json& r) {
         scheme(r, "kv-int4-keep1")["description"]["kv_cache_error"]["layers"][4]["layer"] = 7;
       }, "the model has layers 0..4"},
      {"a KV error on full precision", [&](json& r) {
         scheme(r, "full")["description"]["kv_cache_error"] = scheme(r, "kv-int4-keep1")["description"]["kv_cache_error"];
       }, "scheme \"full\": has \"kv_cache_error\""},
      {"a KV error of another format", [&](json& r) {
         scheme(r, "kv-int4-keep1")["description"]["kv_cache_error"]["format"] = "int8";
       }, "kv_cache_error.format is \"int8\""},
      {"a K-quant on rows of 64", [&](json& r) {
         layer_named(scheme(r, "gguf-q4_k_m")["description"]["layers"], q)["ggml_type"] = "Q4_K";
       }, "stores rows in blocks of 256"},
      {"an unknown ggml type", [&](json& r) {
         layer_named(scheme(r, "gguf-q8_0")["description"]["layers"], q)["ggml_type"] = "Q9_9";
       }, "unknown llama.cpp type 'Q9_9'"},
      {"a type the rules do not give", [&](json& r) {
         layer_named(scheme(r, "gguf-q8_0")["description"]["layers"], q)["ggml_type"] = "Q4_0";
       }, "but the scheme's rules give Q8_0"},
      {"a preset's spec edited", [&](json& r) {
         scheme(r, "int8-moderate-static")["description"]["scheme"]["weights"]["granularity"] = "channel";
       }, "is not that preset's"},
      {"two presets' names swapped", [&](json& r) {
         scheme(r, "gguf-q8_0")["name"] = "swap";
         scheme(r, "gguf-q4_k_m")["name"] = "gguf-q8_0";
         scheme(r, "swap")["name"] = "gguf-q4_k_m";
       }, "is not that preset's"},
      {"zero weight bytes", [&](json& r) {
         layer_named(scheme(r, "gguf-q8_0")["description"]["layers"], q)["weight_bytes"] = 0;
       }, "weight_bytes is 0"},
      {"negative fp32 bytes", [&](json& r) {
         layer_named(scheme(r, "gguf-q8_0")["description"]["layers"], q)["fp32_weight_bytes"] = -4;
       }, "fp32_weight_bytes is -4"},
  };
  for (const Edit& e : edits) {
    SCOPED_TRACE(e.what);
    json r = record;
    e.apply(r);
    EXPECT_TRUE(test::throws_with([&] { verify_record(r, "r.json"); }, {"r.json: scheme", e.message}));
  }

  // check and compare take static scales calibrated on other text for another scheme.
  json other = record;
  scheme(other, "int8-moderate-static")["description"]["static_scales"]["calibration"]["hash"] = "0123456789abcdef";
  const std::vector<std::string> differ = scheme_definition_differences(record, other);
  ASSERT_EQ(differ.size(), 1u);
  EXPECT_NE(differ[0].find("int8-moderate-static"), std::string::npos) << differ[0];
  EXPECT_NE(differ[0].find("static_scales_calibrated_on"), std::string::npos) << differ[0];
  // So do GPTQ's weights solved on other windows.
  json moved = record;
  scheme(moved, "gptq-w4-g128")["description"]["calibrated_weights"]["window_hashes"][0] = "0123456789abcdef";
  const std::vector<std::string> gptq = scheme_definition_differences(record, moved);
  ASSERT_EQ(gptq.size(), 1u);
  EXPECT_NE(gptq[0].find("calibrated_weights_calibrated_on"), std::string::npos) << gptq[0];
  EXPECT_TRUE(scheme_definition_differences(record, record).empty());
}

// --calibration-windows sets every calibrated scheme's windows (GPTQ's and static scales'); a
// preset under it is that preset with the option applied, and any other count is refused.
TEST(RecordSections, CalibrationWindowsApplyToEveryCalibratedScheme) {
  test::TempDir dir;
  const json record = test::stories_eval_record(
      dir, "windows",
      "--model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt --seq-len 64 "
      "--max-windows 3 --calibration-windows 5 --schemes full,int8-moderate-static,gptq-w4-g128");
  ASSERT_FALSE(record.is_null());
  EXPECT_NO_THROW(verify_record(record, "r.json"));
  json r = record;
  EXPECT_EQ(scheme(r, "gptq-w4-g128")["description"]["calibrated_weights"]["windows"], 5);
  EXPECT_EQ(scheme(r, "gptq-w4-g128")["description"]["scheme"]["weights"]["gptq"]["calibration"]["windows"], 5);
  EXPECT_EQ(scheme(r, "int8-moderate-static")["description"]["static_scales"]["windows"], 5);
  EXPECT_EQ(r["options"]["calibration_windows"], 5);
  r["options"]["calibration_windows"] = 6;
  EXPECT_TRUE(test::throws_with([&] { verify_record(r, "r.json"); }, {"r.json: scheme", "is not that preset's"}));
}

// The stream tokens of window `w` of a record's windows protocol (or of a calibration's).
std::pair<std::int64_t, std::int64_t> stream_range(const json& protocol, std::int64_t w) {
  const std::int64_t take = protocol.at("seq_len").get<std::int64_t>() - (protocol.at("bos_per_window") == true ? 1 : 0);
  return {w * take, (w + 1) * take};
}

// --calibration-seq-len: calibration windows of another length over the evaluation data are the
// first that share no stream token with an evaluated window, and the verifier compares stream
// ranges, not indices: window 3 of 48 tokens is no evaluated index but overlaps evaluated window 2.
TEST(RecordSections, CalibrationWindowsOfAnotherLengthShareNoTokenWithTheEvaluation) {
  test::TempDir dir;
  const json record = test::stories_eval_record(
      dir, "seq_len",
      "--model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt --seq-len 64 "
      "--max-windows 3 --calibration-windows 4 --calibration-seq-len 48 --schemes full,int8-moderate-static,gptq-w4");
  ASSERT_FALSE(record.is_null());
  EXPECT_NO_THROW(verify_record(record, "r.json"));
  EXPECT_EQ(record["options"]["calibration_seq_len"], 48);
  json r = record;
  for (const char* name : {"int8-moderate-static", "gptq-w4"}) {
    const json& d = scheme(r, name)["description"];
    const json& cal = d.contains("static_scales") ? d["static_scales"]["calibration"] : d["calibrated_weights"]["calibration"];
    ASSERT_EQ(cal["protocol"]["seq_len"], 48) << name;
    EXPECT_EQ(cal["same_data_as_evaluation"], true) << name;
    // The evaluation reads stream tokens [0, 3 windows); calibration starts at the first 48-token window after them.
    const std::int64_t evaluated_end = stream_range(record["protocol"], 2).second;
    const std::int64_t first = cal["windows"][0].get<std::int64_t>();
    EXPECT_GE(stream_range(cal["protocol"], first).first, evaluated_end) << name;
    EXPECT_LT(stream_range(cal["protocol"], first - 1).first, evaluated_end) << name;  // and not later
    EXPECT_EQ(cal["windows"], json({first, first + 1, first + 2, first + 3})) << name;
  }
  scheme(r, "gptq-w4")["description"]["calibrated_weights"]["calibration"]["windows"][0] = 3;
  EXPECT_TRUE(test::throws_with([&] { verify_record(r, "r.json"); },
                                {"calibrated_weights.calibration.windows holds window 3 (stream tokens", "which the record "
                                 "also evaluates", "overlaps evaluated window 2", "calibration and evaluation windows "
                                 "must be disjoint"}));
}

// --calibration-data: another text calibrates from its first window, named with its hash in the
// record; a copy of the evaluation data under another name is the evaluation data, and its
// evaluated windows are skipped (the verifier knows it by hash). Without a calibrated scheme the
// option is refused.
TEST(RecordSections, CalibrationDataIsAnotherTextOrTheEvaluationsUnderAnyName) {
  test::TempDir dir;
  const std::string base = "--model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt "
                           "--seq-len 64 --max-windows 3 --calibration-windows 2 --schemes full,gptq-w4 ";
  const json other = test::stories_eval_record(dir, "other", base + "--calibration-data text/tinyshakespeare/input.txt");
  ASSERT_FALSE(other.is_null());
  EXPECT_NO_THROW(verify_record(other, "r.json"));
  json r = other;
  json& cal = scheme(r, "gptq-w4")["description"]["calibrated_weights"]["calibration"];
  EXPECT_EQ(cal["same_data_as_evaluation"], false);
  EXPECT_EQ(cal["windows"], json({0, 1}));
  EXPECT_NE(cal["path"].get<std::string>().find("tinyshakespeare/input.txt"), std::string::npos);
  EXPECT_NE(cal["hash"], other["data"]["hash"]);
  EXPECT_NE(other["options"]["calibration_data"].get<std::string>().find("tinyshakespeare"), std::string::npos);
  // Told it was another text while its hash is the evaluation's: the windows must then be disjoint.
  cal["hash"] = other["data"]["hash"];
  EXPECT_TRUE(test::throws_with([&] { verify_record(r, "r.json"); }, {"holds window 0", "overlaps evaluated window 0"}));

  {
    std::ifstream in(test::data_dir() / "text/tinystories/validation-head.txt", std::ios::binary);
    std::ofstream(dir / "copy.txt", std::ios::binary) << in.rdbuf();
  }
  const json copy = test::stories_eval_record(dir, "copy", base + "--calibration-data " + (dir / "copy.txt").string());
  ASSERT_FALSE(copy.is_null());
  EXPECT_NO_THROW(verify_record(copy, "r.json"));
  json c = copy;
  EXPECT_EQ(scheme(c, "gptq-w4")["description"]["calibrated_weights"]["calibration"]["same_data_as_evaluation"], true);
  EXPECT_EQ(scheme(c, "gptq-w4")["description"]["calibrated_weights"]["calibration"]["windows"], json({3, 4}));

  const test::CommandResult refused = test::run_qeval(
      test::kEval + " --data-dir " + test::data_dir().string() +
      " --model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt --seq-len 64 "
      "--max-windows 2 --schemes full,w4-zeropoint --calibration-data text/tinyshakespeare/input.txt");
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.output.find("--calibration-data text/tinyshakespeare/input.txt: sets the calibration of "
                                "calibrated schemes"), std::string::npos) << refused.output;
}

// A rounding variant is named after its scheme and verified with it; a user's scheme under its own
// name may hold any valid spec.
TEST(RecordSections, SchemesOfTheirOwnNameAndRoundingVariantsPass) {
  test::TempDir dir;
  std::ofstream(dir / "mine.json") << R"({"name": "mine", "weights": {"kind": "fp8", "element": "e4m3",
      "granularity": "channel"}, "input_activations": {"kind": "none"}})";
  const json record = test::stories_eval_record(
      dir, "own", "--model models/stories260K/stories260K.bin --data text/tinystories/validation-head.txt --seq-len 64 "
                  "--max-windows 3 --rounding-band 1 --schemes full,int8-coarse," + (dir / "mine.json").string());
  ASSERT_FALSE(record.is_null());
  EXPECT_NO_THROW(verify_record(record, "r.json"));
}

}  // namespace
}  // namespace qeval
