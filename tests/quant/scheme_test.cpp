// Scheme specs: the presets against DESIGN.md §5's table (written out here independently of the
// JSON files), the compiled-in presets against configs/schemes/, JSON round trips, layer
// selection, and the errors for invalid specs and unknown names.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <fstream>
#include <optional>

#include "common/error.h"
#include "common/files.h"
#include "quant/quantized_linear.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "quant/schemes/spec.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

const std::filesystem::path kRepo = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();

QuantSpec q(QuantKind k, Granularity g, std::int64_t group = 0) { return {k, g, group}; }
// A floating-point-format spec (issue 61), optionally with a static scale of N windows (max).
QuantSpec fq(QuantKind k, Granularity g, std::int64_t block, ElementType e, std::int64_t static_windows = 0) {
  QuantSpec s{k, g, block};
  s.element = e;
  if (static_windows > 0) s.calibration = ActivationCalibration{static_windows, 100.0};
  return s;
}
const QuantSpec kNone{};

// Expects `fn` to throw qeval::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<std::string> parts) {
  EXPECT_TRUE(test::throws_with(fn, parts));
}

TEST(SchemePresets, MatchTheDesignTable) {
  using K = QuantKind;
  using G = Granularity;
  using E = ElementType;
  struct Row {
    const char* name;
    QuantSpec w, in, out;
    std::int64_t keep_first = 0;
    std::optional<double> outlier_threshold = std::nullopt;
    bool gguf = false;  // issue 64: llama-quantize's file types quantise the embedding and the head too
  };
  // A llama.cpp file type's rule (quant/schemes/ggml_rules.h).
  auto gg = [](const char* file_type) {
    QuantSpec s;
    s.kind = QuantKind::ggml;
    s.ggml_file_type = file_type;
    return s;
  };
  // Issue 77: GPTQ (docs/calibrated.md): llm-compressor 0.14's W4A16 defaults, AutoGPTQ 0.7.1's desc_act.
  auto gptq = [](Granularity g, std::int64_t group, GptqActOrder order, bool autogptq, int bits = 4) {
    QuantSpec s = q(QuantKind::int4_zeropoint, g, group);
    GptqSpec settings;
    settings.bits = bits;
    settings.actorder = order;
    settings.updated_group_params = autogptq;
    settings.autogptq_arithmetic = autogptq;
    s.gptq = settings;
    return s;
  };
  // Issue 77 item 3: AWQ as llm-compressor 0.14's AWQModifier with W4A16_ASYM's defaults.
  auto awq = [](Granularity g, std::int64_t group) {
    QuantSpec s = q(QuantKind::int4_zeropoint, g, group);
    s.awq = AwqSpec{};
    return s;
  };
  const Row table[] = {
      {"full", kNone, kNone, kNone},
      {"int8-fine", q(K::int8_absmax, G::channel), q(K::int8_absmax, G::feature), kNone},
      {"int8-moderate", q(K::int8_absmax, G::tensor), q(K::int8_absmax, G::tensor), kNone},
      {"int8-coarse", q(K::int8_absmax, G::tensor), q(K::int8_absmax, G::tensor), q(K::int8_absmax, G::tensor)},
      {"int8-vectorwise", q(K::int8_absmax, G::channel), q(K::int8_absmax, G::token), kNone},
      {"w4-zeropoint", q(K::int4_zeropoint, G::channel), kNone, kNone},
      {"w4-zeropoint-g128", q(K::int4_zeropoint, G::group, 128), kNone, kNone},
      // Issue 19: moderate and coarse with the first position kept in full precision.
      {"int8-moderate-keep1", q(K::int8_absmax, G::tensor), q(K::int8_absmax, G::tensor), kNone, 1},
      {"int8-coarse-keep1", q(K::int8_absmax, G::tensor), q(K::int8_absmax, G::tensor), q(K::int8_absmax, G::tensor), 1},
      // Issue 15: LLM.int8's vector-wise scheme with outlier features (|x| >= 6) in fp32.
      {"int8-mixed", q(K::int8_absmax, G::channel), q(K::int8_absmax, G::token), kNone, 0, 6.0},
      // Issue 61: the formats users ship (docs/formats.md).
      {"fp8-e4m3", fq(K::fp8, G::channel, 0, E::e4m3), fq(K::fp8, G::token, 0, E::e4m3), kNone},
      {"fp8-e4m3-tensor", fq(K::fp8, G::tensor, 0, E::e4m3), fq(K::fp8, G::tensor, 0, E::e4m3), kNone},
      {"fp8-e4m3-static", fq(K::fp8, G::tensor, 0, E::e4m3), fq(K::fp8, G::tensor, 0, E::e4m3, 16), kNone},
      {"fp8-e5m2", fq(K::fp8, G::channel, 0, E::e5m2), fq(K::fp8, G::token, 0, E::e5m2), kNone},
      {"mxfp8", fq(K::mx, G::block, 32, E::e4m3), fq(K::mx, G::block, 32, E::e4m3), kNone},
      {"mxfp6", fq(K::mx, G::block, 32, E::e2m3), fq(K::mx, G::block, 32, E::e2m3), kNone},
      {"mxfp4", fq(K::mx, G::block, 32, E::e2m1), fq(K::mx, G::block, 32, E::e2m1), kNone},
      {"mxfp4-weights", fq(K::mx, G::block, 32, E::e2m1), kNone, kNone},
      {"nvfp4", fq(K::nvfp4, G::block, 16, E::e2m1), fq(K::nvfp4, G::block, 16, E::e2m1), kNone},
      {"nvfp4-weights", fq(K::nvfp4, G::block, 16, E::e2m1), kNone, kNone},
      {"int8-moderate-static", q(K::int8_absmax, G::tensor), fq(K::int8_absmax, G::tensor, 0, E::e4m3, 16), kNone},
      {"fp8-e4m3-static-keep1", fq(K::fp8, G::tensor, 0, E::e4m3), fq(K::fp8, G::tensor, 0, E::e4m3, 16), kNone, 1},
      {"mxfp4-keep1", fq(K::mx, G::block, 32, E::e2m1), fq(K::mx, G::block, 32, E::e2m1), kNone, 1},
      // Issue 64: llama-quantize's file types (docs/gguf-types.md), full-precision activations.
      {"gguf-q8_0", gg("q8_0"), kNone, kNone, 0, std::nullopt, true},
      {"gguf-q6_k", gg("q6_k"), kNone, kNone, 0, std::nullopt, true},
      {"gguf-q5_k_m", gg("q5_k_m"), kNone, kNone, 0, std::nullopt, true},
      {"gguf-q4_k_m", gg("q4_k_m"), kNone, kNone, 0, std::nullopt, true},
      {"gguf-q4_k_s", gg("q4_k_s"), kNone, kNone, 0, std::nullopt, true},
      {"gguf-q4_0", gg("q4_0"), kNone, kNone, 0, std::nullopt, true},
      {"gguf-iq4_nl", gg("iq4_nl"), kNone, kNone, 0, std::nullopt, true},
      {"gguf-mxfp4-moe", gg("mxfp4_moe"), kNone, kNone, 0, std::nullopt, true},
      {"gptq-w4-g128", gptq(G::group, 128, GptqActOrder::static_order, false), kNone, kNone},
      {"gptq-w4-g128-desc", gptq(G::group, 128, GptqActOrder::group, true), kNone, kNone},
      {"gptq-w3-g128", gptq(G::group, 128, GptqActOrder::static_order, false, 3), kNone, kNone},
      {"gptq-w4", gptq(G::channel, 0, GptqActOrder::static_order, false), kNone, kNone},
      {"awq-w4-g128", awq(G::group, 128), kNone, kNone},
      // Issue 62: quantised key/value caches (docs/kv-cache.md); their kv_cache in kKvRows below.
      {"kv-int8", kNone, kNone, kNone},
      {"kv-fp8", kNone, kNone, kNone},
      {"kv-q8_0", kNone, kNone, kNone},
      {"kv-q4_0", kNone, kNone, kNone},
      {"kv-int4", kNone, kNone, kNone},
      {"kv-q4_0-keep1", kNone, kNone, kNone},
      {"kv-int4-keep1", kNone, kNone, kNone},
      {"w8a8-kv8", q(K::int8_absmax, G::channel), q(K::int8_absmax, G::token), kNone},
      {"kv-q8_0-hadamard", kNone, kNone, kNone},
      {"kv-q4_0-hadamard", kNone, kNone, kNone},
  };
  // Preset -> {format, int4 group, kept first positions}; every other preset has no kv_cache.
  const std::map<std::string, KvCacheSpec> kKvRows = {
      {"kv-int8", {KvCacheFormat::int8, 32, 0}},       {"kv-fp8", {KvCacheFormat::fp8_e4m3, 32, 0}},
      {"kv-q8_0", {KvCacheFormat::q8_0, 32, 0}},       {"kv-q4_0", {KvCacheFormat::q4_0, 32, 0}},
      {"kv-int4", {KvCacheFormat::int4, 32, 0}},       {"kv-q4_0-keep1", {KvCacheFormat::q4_0, 32, 1}},
      {"kv-int4-keep1", {KvCacheFormat::int4, 32, 1}}, {"w8a8-kv8", {KvCacheFormat::int8, 32, 0}},
      {"kv-q8_0-hadamard", {KvCacheFormat::q8_0, 32, 0, KvCacheRotation::hadamard}},
      {"kv-q4_0-hadamard", {KvCacheFormat::q4_0, 32, 0, KvCacheRotation::hadamard}},
  };
  std::vector<std::string> names;
  for (const auto& row : table) {
    names.push_back(row.name);
    SchemeSpec s = resolve_scheme(row.name);
    EXPECT_EQ(s.name, row.name);
    EXPECT_TRUE(s.weights == row.w) << row.name;
    EXPECT_TRUE(s.input_activations == row.in) << row.name;
    EXPECT_TRUE(s.output_activations == row.out) << row.name;
    EXPECT_EQ(s.quantize_lm_head, row.gguf) << row.name;
    EXPECT_EQ(s.quantize_embedding, row.gguf) << row.name;
    EXPECT_EQ(s.quantize_ssm_inner, row.gguf) << row.name;
    EXPECT_TRUE(s.tensor_types.empty()) << row.name;
    EXPECT_TRUE(s.include.empty() && s.exclude.empty()) << row.name;
    EXPECT_EQ(s.execution, ExecutionPreference::automatic) << row.name;
    EXPECT_TRUE(s.keep_tokens == (KeepTokens{KeepRule::first, row.keep_first})) << row.name;
    EXPECT_TRUE(s.outlier_threshold == row.outlier_threshold) << row.name;
    EXPECT_TRUE(s.kv_cache == (kKvRows.count(row.name) ? kKvRows.at(row.name) : KvCacheSpec{})) << row.name;
  }
  EXPECT_EQ(preset_names(), names);
}

TEST(SchemePresets, CompiledInTextEqualsTheFilesInConfigs) {
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kRepo / "configs" / "schemes")) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    const std::string name = entry.path().stem().string();
    EXPECT_EQ(preset_json_text(name), read_file(entry.path())) << name << ": rebuild so the binary embeds the file";
  }
  EXPECT_EQ(files, preset_names().size());
}

TEST(SchemePresets, ResolveFromAnyWorkingDirectory) {
  test::TempDir dir;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  SchemeSpec s = resolve_scheme("int8-coarse");
  std::filesystem::current_path(cwd);
  EXPECT_TRUE(s.output_activations.enabled());
}

TEST(SchemeSpec, JsonRoundTripsEveryField) {
  SchemeSpec s;
  s.name = "mine";
  s.description = "w4 g64, per-token int8 inputs, quantised head, MLP only";
  s.weights = q(QuantKind::int4_zeropoint, Granularity::group, 64);
  s.input_activations = q(QuantKind::int8_absmax, Granularity::token);
  s.output_activations = q(QuantKind::int8_absmax, Granularity::token);
  s.quantize_lm_head = true;
  s.include = {"layers.*.mlp.*", "lm_head"};
  s.exclude = {"layers.0.*"};
  s.execution = ExecutionPreference::reference;
  nlohmann::json j = scheme_to_json(s);
  EXPECT_EQ(j.at("weights").at("granularity"), "group:64");
  EXPECT_EQ(j.at("weights").at("bits"), 4);
  EXPECT_EQ(j.at("execution"), "reference");
  SchemeSpec back = scheme_from_json(j, "test");
  EXPECT_EQ(scheme_to_json(back), j);
  for (const auto& name : preset_names()) {
    SchemeSpec p = preset_scheme(name);
    EXPECT_EQ(scheme_to_json(scheme_from_json(scheme_to_json(p), name)), scheme_to_json(p)) << name;
  }
}

TEST(SchemeSpec, ResolvesAJsonFileAndNamesItAfterTheFileByDefault) {
  test::TempDir dir;
  std::ofstream(dir / "w8a8-token.json") << R"({"weights": {"kind": "int8_absmax", "granularity": "channel"},
    "input_activations": {"kind": "int8_absmax", "granularity": "token", "bits": 8}})";
  SchemeSpec s = resolve_scheme((dir / "w8a8-token.json").string());
  EXPECT_EQ(s.name, "w8a8-token");
  EXPECT_EQ(s.input_activations.granularity, Granularity::token);
  EXPECT_FALSE(s.output_activations.enabled());
  EXPECT_EQ(kernel_path_unavailable_reason(s), "");
}

TEST(SchemeSpec, NamesWithControlCharactersAreRefusedWhereTheyAreDefined) {
  // A name reaches tables, CSV, gnuplot scripts and terminals: a newline in it could forge a line.
  for (const char* text : {R"j({"name": "w8\nsystem('touch x')"})j", R"j({"name": "a\u001b[31mred"})j", R"j({"name": ""})j"})
    expect_error([&] { scheme_from_json(nlohmann::json::parse(text), "spec.json"); }, {"spec.json", "\"name\"", "control"});
  test::TempDir dir;
  const auto path = dir / "evil\nname.json";
  std::ofstream(path) << R"({"weights": {"kind": "int8_absmax", "granularity": "channel"}})";
  expect_error([&] { resolve_scheme(path.string()); }, {"evil\\nname.json", "add a \"name\" key"});
}

TEST(SchemeSpec, InvalidSpecsFailListingTheValidValues) {
  auto parse = [](const char* text) { return [text] { scheme_from_json(nlohmann::json::parse(text), "spec.json"); }; };
  expect_error(parse(R"({"weights": {"kind": "int3"}})"), {"spec.json", "int3", "none, int8_absmax, int4_zeropoint"});
  expect_error(parse(R"({"weights": {"kind": "int8_absmax", "granularity": "token"}})"),
               {"spec.json: weights", "'token'", "tensor, channel, group:<g>"});
  expect_error(parse(R"({"input_activations": {"kind": "int8_absmax", "granularity": "channel"}})"),
               {"input_activations", "tensor, token, feature"});
  expect_error(parse(R"({"output_activations": {"kind": "int8_absmax", "granularity": "feature"}})"),
               {"output_activations", "tensor, token"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "group:0"}})"), {"group:<g>"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "group:abc"}})"), {"group:128"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint"}})"), {"needs a granularity", "tensor, channel"});
  expect_error(parse(R"({"weights": {"granularity": "tensor"}})"), {"missing \"kind\"", "int8_absmax"});
  expect_error(parse(R"({"weights": {"kind": "int8_absmax", "granularity": "tensor", "bits": 4}})"),
               {"bits 4 disagrees"});
  expect_error(parse(R"({"weight": {"kind": "none"}})"), {"unknown key 'weight'", "weights, input_activations"});
  expect_error(parse(R"({"weights": {"kind": "none", "scale": 1}})"), {"unknown key 'scale'", "kind, granularity, bits"});
  expect_error(parse(R"({"execution": "gpu"})"), {"'gpu'", "auto, reference, kernel"});
  expect_error(parse(R"({"include": "layers.*"})"), {"list of name patterns"});
  expect_error(parse(R"([1, 2])"), {"must be a JSON object"});
  // GPTQ's settings (issue 77).
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "tensor", "method": "gptq"}})"),
               {"method gptq", "channel or group:g", "'tensor'"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "awq2"}})"),
               {"method 'awq2'", "rtn", "gptq"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "gptq": {}}})"),
               {"\"gptq\" settings need \"method\": \"gptq\""});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "gptq",
                                     "gptq": {"actorder": "desc"}}})"),
               {"actorder", "'desc'", "none, static", "group"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "gptq",
                                     "gptq": {"actorder": "group", "group_params": "original"}}})"),
               {"group_params 'original' contradicts actorder 'group'"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "gptq",
                                     "gptq": {"damping": 0.1}}})"),
               {"unknown key 'damping'", "dampening"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "gptq",
                                     "gptq": {"calibration": {"windows": 0}}}})"),
               {"calibration.windows", "at least 1"});
  expect_error(parse(R"({"weights": {"kind": "int8_absmax", "granularity": "channel", "method": "gptq"}})"),
               {"unknown key 'method'"});
  // GPTQ's widths: 2 to 4 bits in the 4-bit container; round to nearest stays at 4.
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "gptq", "bits": 8}})"),
               {"bits 8", "2, 3 or 4 bits", "8-bit GPTQ"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "bits": 3}})"),
               {"bits 3 disagrees with kind int4_zeropoint (4 bits)", "need \"method\": \"gptq\""});
  const SchemeSpec two = scheme_from_json(nlohmann::json::parse(
      R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "gptq", "bits": 2}})"), "spec.json");
  EXPECT_EQ(two.weights.bits(), 2);
  EXPECT_EQ(scheme_from_json(scheme_to_json(two), "again").weights, two.weights);  // the width round-trips
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "gptq"},
                         "input_activations": {"kind": "int8_absmax", "granularity": "token"}})"),
               {"method gptq calibrates weight-only schemes"});
  // AWQ's settings (issue 77 item 3).
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "tensor", "method": "awq"}})"),
               {"method awq", "channel or group:g", "'tensor'"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "awq": {}}})"),
               {"\"awq\" settings need \"method\": \"awq\""});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "gptq", "awq": {}}})"),
               {"\"awq\" settings need \"method\": \"awq\"", "the method here is gptq"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "awq",
                                     "awq": {"duo_scaling": "yes"}}})"),
               {"awq.duo_scaling", "true", "\"both\"", "\"yes\""});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "awq",
                                     "awq": {"clip": true}}})"),
               {"awq: unknown key 'clip'", "duo_scaling, n_grid, calibration"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "awq",
                                     "awq": {"n_grid": 3, "duo_scaling": "both"}}})"),
               {"awq.n_grid must be at least 4", "duo_scaling both"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel", "method": "awq",
                                     "awq": {"calibration": {"windows": 0}}}})"),
               {"awq.calibration.windows", "at least 1"});
  expect_error(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "group:128", "method": "awq"},
                         "quantize_lm_head": true})"),
               {"method awq quantises the blocks' linears", "quantize_lm_head"});
}

TEST(SchemeSpec, AwqSettingsRoundTripAndTakeTheCalibrationWindows) {
  SchemeSpec s = scheme_from_json(nlohmann::json::parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "group:64",
      "method": "awq", "awq": {"duo_scaling": "both", "n_grid": 10, "calibration": {"windows": 3}}}})"), "test");
  ASSERT_TRUE(s.weights.awq.has_value());
  EXPECT_EQ(s.weights.awq->duo_scaling, AwqDuo::both);
  EXPECT_EQ(s.weights.awq->n_grid, 10);
  EXPECT_EQ(s.weights.method(), "awq");
  EXPECT_TRUE(s.needs_weight_calibration());
  const nlohmann::json j = scheme_to_json(s);
  EXPECT_EQ(j.at("weights").at("method"), "awq");
  EXPECT_EQ(j.at("weights").at("awq").at("duo_scaling"), "both");
  EXPECT_TRUE(scheme_from_json(j, "round trip").weights == s.weights);
  apply_calibration_windows(s, 7);
  EXPECT_EQ(s.weights.awq->windows, 7);
  EXPECT_EQ(s.weights.calibration_windows(), 7);
  const SchemeSpec preset = preset_scheme("awq-w4-g128");
  EXPECT_EQ(scheme_to_json(preset).at("weights").at("awq").at("duo_scaling"), true);
}

TEST(SchemeSpec, UnknownNamesAndBadFilesFailListingThePresets) {
  expect_error([] { resolve_scheme("int8-medium"); },
               {"'int8-medium'", "full, int8-fine, int8-moderate, int8-coarse, int8-vectorwise, w4-zeropoint, "
                                 "w4-zeropoint-g128"});
  expect_error([] { preset_scheme("nope"); }, {"unknown scheme preset 'nope'", "int8-fine"});
  test::TempDir dir;
  std::ofstream(dir / "broken.json") << "{\"weights\": ";
  expect_error([&] { resolve_scheme((dir / "broken.json").string()); }, {"broken.json", "invalid JSON"});
}

TEST(SchemeSpec, SelectsBlockLinearsAndTheHeadOnlyWhenAsked) {
  SchemeSpec s = preset_scheme("int8-moderate");
  EXPECT_TRUE(s.selects("layers.0.attn.qkv"));
  EXPECT_TRUE(s.selects("layers.11.mlp.down"));
  EXPECT_FALSE(s.selects("lm_head"));
  s.quantize_lm_head = true;
  EXPECT_TRUE(s.selects("lm_head"));
  s.include = {"layers.*.mlp.*"};
  EXPECT_TRUE(s.selects("layers.3.mlp.up"));
  EXPECT_FALSE(s.selects("layers.3.attn.o"));
  EXPECT_FALSE(s.selects("lm_head"));  // include filters the head too
  s.include.clear();
  s.exclude = {"layers.0.*", "*.down"};
  EXPECT_FALSE(s.selects("layers.0.attn.q"));
  EXPECT_FALSE(s.selects("layers.2.mlp.down"));
  EXPECT_TRUE(s.selects("layers.10.attn.q"));
  EXPECT_FALSE(preset_scheme("full").selects("layers.0.attn.q"));
}

TEST(SchemeSpec, GlobMatch) {
  EXPECT_TRUE(glob_match("layers.*.attn.?", "layers.12.attn.q"));
  EXPECT_FALSE(glob_match("layers.*.attn.?", "layers.12.attn.qkv"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("layers.1*", "layers.10.mlp.up"));
  EXPECT_FALSE(glob_match("layers.1", "layers.10"));
  EXPECT_TRUE(glob_match("*mlp*down", "layers.3.mlp.down"));
}

TEST(SchemeSpec, KernelPathAvailabilityFollowsTheMaths) {
  EXPECT_EQ(kernel_path_unavailable_reason(preset_scheme("int8-fine")),
            "per-feature activation scales cannot be factored out of an integer GEMM");
  for (const char* name : {"int8-moderate", "int8-coarse", "int8-vectorwise", "w4-zeropoint", "w4-zeropoint-g128"})
    EXPECT_EQ(kernel_path_unavailable_reason(preset_scheme(name)), "") << name;
  SchemeSpec s = preset_scheme("int8-vectorwise");
  s.weights = q(QuantKind::int8_absmax, Granularity::group, 64);
  EXPECT_NE(kernel_path_unavailable_reason(s).find("per-group int8 weight scales"), std::string::npos);
  s = preset_scheme("int8-vectorwise");
  s.input_activations = kNone;
  EXPECT_NE(kernel_path_unavailable_reason(s), "");
  EXPECT_NE(kernel_path_unavailable_reason(preset_scheme("full")), "");
}

}  // namespace
}  // namespace qeval
