// The one ModelConfig validator (model/config_validation.h): every domain refused with the file,
// the key as the file spells it and the value; cross-field rules name the keys the loader gave.
#include "model/config_validation.h"

#include <gtest/gtest.h>

#include <cmath>

#include "model/config.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using nlohmann::json;
using F = ConfigField;

TEST(ConfigValidation, IntegersOutsideTheirDomainNameFileKeyAndValue) {
  ConfigSource src("cfg.json");
  const json j = {{"num_hidden_layers", 0}, {"num_attention_heads", -2}, {"vocab_size", "12"},
                  {"hidden_size", 16.0}, {"huge", std::int64_t{1} << 40}, {"layers", 4}};
  EXPECT_EQ(src.integer(F::n_layers, j, "layers"), 4);
  EXPECT_FALSE(src.integer(F::n_layers, j, "absent").has_value());
  EXPECT_TRUE(test::throws_with([&] { src.integer(F::n_layers, j, "num_hidden_layers"); },
                                {"cfg.json: \"num_hidden_layers\" is 0: expected an integer in 1..2147483647"}));
  EXPECT_TRUE(test::throws_with([&] { src.integer(F::n_heads, j, "num_attention_heads"); }, {"\"num_attention_heads\" is -2"}));
  EXPECT_TRUE(test::throws_with([&] { src.integer(F::vocab_size, j, "vocab_size"); }, {"\"vocab_size\" is \"12\""}));
  EXPECT_TRUE(test::throws_with([&] { src.integer(F::d_model, j, "hidden_size"); }, {"\"hidden_size\" is 16.0"}));
  EXPECT_TRUE(test::throws_with([&] { src.integer(F::d_model, j, "huge"); }, {"\"huge\" is 1099511627776"}));
  EXPECT_TRUE(test::throws_with([&] { src.required_integer(F::d_ff, j, "intermediate_size"); },
                                {"cfg.json: missing required \"intermediate_size\""}));
}

TEST(ConfigValidation, RealsMustBeFinitePositiveAndFractionsWithinZeroOne) {
  ConfigSource src("cfg.json", "metadata {}");
  for (double bad : {0.0, -1.0, static_cast<double>(NAN), static_cast<double>(INFINITY)})
    EXPECT_TRUE(test::throws_with([&] { src.real_value(F::rope_theta, "llama.rope.freq_base", bad); },
                                  {"cfg.json: metadata llama.rope.freq_base is", "expected a finite number > 0"}))
        << bad;
  EXPECT_EQ(src.real_value(F::norm_eps, "eps", 1e-6), 1e-6);
  for (double bad : {0.0, 1.5, -0.5})
    EXPECT_TRUE(test::throws_with([&] { src.real_value(F::rotary_fraction, "partial_rotary_factor", bad); },
                                  {"partial_rotary_factor", "(0, 1]"}));
  EXPECT_EQ(src.real_value(F::rotary_fraction, "partial_rotary_factor", 1.0), 1.0);
}

TEST(ConfigValidation, RopeScalingPlainOnlyAndAlwaysTyped) {
  ConfigSource src("cfg.json");
  EXPECT_NO_THROW(src.rope_scaling(nullptr, "rope_scaling"));
  EXPECT_NO_THROW(src.rope_scaling({{"rope_type", "default"}}, "rope_scaling"));
  EXPECT_NO_THROW(src.rope_scaling("none", "rope.scaling.type"));
  EXPECT_TRUE(test::throws_with([&] { src.rope_scaling({{"factor", 8.0}}, "rope_scaling"); },
                                {"cfg.json: \"rope_scaling\" is {\"factor\":8.0} without a \"rope_type\""}));
  EXPECT_TRUE(test::throws_with([&] { src.rope_scaling({{"type", "linear"}, {"factor", 2}}, "rope_scaling"); },
                                {"type \"linear\" is not supported"}));
  EXPECT_TRUE(test::throws_with([&] { src.rope_scaling({{"rope_type", "warp"}}, "rope_scaling"); }, {"type \"warp\" is unknown"}));
  EXPECT_TRUE(test::throws_with([&] { src.rope_scaling(json::array({1}), "rope_scaling"); }, {"\"rope_scaling\" is [1]"}));
}

ModelConfig llama_like() {
  ModelConfig c;
  c.vocab_size = 32;
  c.d_model = 16;
  c.d_ff = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.norm = NormKind::rmsnorm;
  c.position = PositionKind::rope;
  c.mlp = MlpKind::swiglu;
  return c;
}

// Cross-field rules name the keys the loader gave for each field (HF names here).
TEST(ConfigValidation, CrossFieldRulesNameTheFilesKeys) {
  ConfigSource src("config.json");
  src.name(F::n_heads, "num_attention_heads");
  src.name(F::n_kv_heads, "num_key_value_heads");
  src.name(F::d_model, "hidden_size");
  ModelConfig c = llama_like();
  EXPECT_NO_THROW(c.validate(src));
  c.n_kv_heads = 3;
  EXPECT_TRUE(test::throws_with([&] { c.validate(src); },
                                {"config.json: \"num_attention_heads\" 4 is not a multiple of \"num_key_value_heads\" 3"}));
  c.n_kv_heads = 8;
  EXPECT_TRUE(test::throws_with([&] { c.validate(src); }, {"\"num_key_value_heads\" is 8, more than the \"num_attention_heads\" 4"}));
  c = llama_like();
  c.d_model = 18;
  EXPECT_TRUE(test::throws_with([&] { c.validate(src); }, {"\"hidden_size\" 18 is not a multiple of \"num_attention_heads\" 4"}));
  c = llama_like();
  c.rope_theta = 0;
  EXPECT_TRUE(test::throws_with([&] { c.validate(src); }, {"\"rope_theta\" is 0"}));
  c = llama_like();
  c.attention_windows = {4};
  EXPECT_TRUE(test::throws_with([&] { c.validate(src); }, {"\"attention_windows\" has 1 entries"}));
  c = llama_like();
  c.n_layers = 1 << 30;
  c.d_ff = 1 << 30;
  EXPECT_TRUE(test::throws_with([&] { c.validate(src); }, {"parameters", "not a model"}));
}

// qeval's own config.json goes through the same rules, and what config_to_json writes reads back.
TEST(ConfigValidation, QevalConfigRoundTripsAndRefusesDeclaredOffValues) {
  ModelConfig c = llama_like();
  c.attention_windows = {4, 0};
  c.rope_theta_local = 10.0;
  c.final_logit_softcap = 30.0;
  c.head_size = 8;
  EXPECT_EQ(config_to_json(config_from_json(config_to_json(c), "c.json")), config_to_json(c));
  json j = config_to_json(c);
  j["final_logit_softcap"] = 0.0;  // "off" is the key's absence, never a value
  EXPECT_TRUE(test::throws_with([&] { config_from_json(j, "c.json"); }, {"c.json: \"final_logit_softcap\" is 0"}));
  j = config_to_json(c);
  j["norm"] = "batchnorm";
  EXPECT_TRUE(test::throws_with([&] { config_from_json(j, "c.json"); }, {"c.json: \"norm\": unknown norm 'batchnorm'"}));
}

}  // namespace
}  // namespace qeval
