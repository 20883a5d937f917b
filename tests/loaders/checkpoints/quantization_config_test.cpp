// The quantisation-config parser (loaders/checkpoints/quantization_config.h): each method's keys
// as the libraries write them, target / ignore matching, and bad settings refused naming the
// file, the key path, what was expected and what was found.
#include "loaders/checkpoints/quantization_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace qeval {
namespace {

using nlohmann::json;

json ct_config(const std::string& format, json weights) {
  return {{"quant_method", "compressed-tensors"},
          {"format", format},
          {"ignore", {"lm_head"}},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr}}}}}};
}

const json kBnbNf4 = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}, {"bnb_4bit_quant_type", "nf4"},
                      {"bnb_4bit_use_double_quant", true}};
const json kAwq = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 16}, {"zero_point", true}, {"version", "gemm"}};

TEST(QuantizationConfig, ParsesEachMethod) {
  const std::string f = "config.json";
  const QuantizationConfig gptq = parse_quantization_config(json{{"quant_method", "gptq"}, {"bits", 3}, {"group_size", 16}, {"desc_act", true}, {"sym", false}}, f, "quantization_config");
  EXPECT_EQ(gptq.method, QuantMethod::gptq);
  EXPECT_EQ(gptq.bits, 3);
  EXPECT_TRUE(gptq.desc_act);
  EXPECT_EQ(gptq.gptq_format, GptqFormat::v1);
  const QuantizationConfig ct = parse_quantization_config(
      ct_config("pack-quantized", {{"num_bits", 4}, {"strategy", "group"}, {"group_size", 128}}), f, "quantization_config");
  EXPECT_EQ(ct.format, "pack-quantized");
  EXPECT_EQ(ct.group_size, 128);
  EXPECT_NE(ct.group_for("model.layers.0.mlp.up_proj"), nullptr);
  EXPECT_EQ(ct.group_for("lm_head"), nullptr);  // ignored
  const QuantizationConfig fp8 = parse_quantization_config(json{{"quant_method", "fp8"}, {"weight_block_size", {32, 32}}, {"activation_scheme", "dynamic"}}, f, "quantization_config");
  EXPECT_EQ(fp8.block_rows, 32);
  EXPECT_EQ(fp8.describe()["activation_scheme"], "dynamic");
  const QuantizationConfig bnb = parse_quantization_config(kBnbNf4, f, "quantization_config");
  EXPECT_EQ(bnb.format, "nf4");
  EXPECT_TRUE(bnb.bnb_double_quant);
  // AutoAWQ's quant_config.json keys.
  const QuantizationConfig awq =
      parse_quantization_config({{"w_bit", 4}, {"q_group_size", 64}, {"zero_point", true}, {"version", "GEMM"}}, "quant_config.json",
                                "quant_config.json");
  EXPECT_EQ(awq.method, QuantMethod::awq);
  EXPECT_EQ(awq.group_size, 64);
}

TEST(QuantizationConfigBadInput, NamesFileKeyExpectedAndFound) {
  auto error = [](json qc) {
    try {
      parse_quantization_config(qc, "/x/config.json", "quantization_config");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const json gptq = json{{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 16}, {"checkpoint_format", "gptq_v2"}};
  auto with = [](json j, const std::string& key, json value) {
    j[key] = value;
    return j;
  };
  EXPECT_EQ(error(gptq), "no error");
  EXPECT_EQ(error(with(gptq, "bits", 5)), "/x/config.json: quantization_config.bits is 5; GPTQ has 2, 3, 4, 8 bits");
  EXPECT_EQ(error(with(gptq, "bits", "4")), "/x/config.json: quantization_config.bits should be an integer, found \"4\"");
  EXPECT_NE(error(with(gptq, "checkpoint_format", "marlin")).find("quantization_config.checkpoint_format is \"marlin\""),
            std::string::npos);
  EXPECT_NE(error(with(kAwq, "version", "gemv")).find("quantization_config.version is \"gemv\""),
            std::string::npos);
  EXPECT_NE(error(with(kAwq, "bits", 8)).find("quantization_config.bits is 8; AWQ's GEMM packing has 4 bits"),
            std::string::npos);
  EXPECT_NE(error(with(gptq, "quant_method", "hqq")).find("quantization_config.quant_method is \"hqq\"; expected one of"),
            std::string::npos);
  EXPECT_NE(error(with(kBnbNf4, "load_in_8bit", true)).find("expected exactly one true"),
            std::string::npos);
  json ct = ct_config("pack-quantized", {{"num_bits", 9}});
  EXPECT_EQ(error(ct), "/x/config.json: quantization_config.config_groups.group_0.weights.num_bits is 9; compressed-tensors "
                       "stores 1 to 8 bits");
  ct = ct_config("float-quantized", {{"num_bits", 4}, {"type", "int"}});
  EXPECT_NE(error(ct).find("quantization_config.format is \"float-quantized\", which cannot hold int4"), std::string::npos);
  ct = ct_config("pack-quantized", {{"num_bits", 4}, {"strategy", "group"}});
  EXPECT_NE(error(ct).find("group_0.weights.group_size is 0; strategy group needs a positive group_size"), std::string::npos);
  ct = ct_config("pack-quantized", {{"num_bits", 4}});
  ct["config_groups"]["group_0"]["targets"] = {"re:(unclosed"};
  EXPECT_NE(error(ct).find("\"re:(unclosed\" is not a valid regular expression"), std::string::npos);
  EXPECT_NE(error(json::array()).find("quantization_config should be an object, found []"), std::string::npos);
}

TEST(QuantizationConfig, TargetsAndIgnoreMatchAsCompressedTensorsDoes) {
  json qc = ct_config("float-quantized", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}});
  qc["config_groups"]["group_0"]["targets"] = {"re:.*self_attn\\.(q|k)_proj$", "model.layers.1.mlp.down_proj"};
  qc["ignore"] = {"re:model\\.layers\\.0\\."};
  const QuantizationConfig c = parse_quantization_config(qc, "config.json", "quantization_config");
  EXPECT_EQ(c.group_for("model.layers.0.self_attn.q_proj"), nullptr);  // ignored
  EXPECT_NE(c.group_for("model.layers.1.self_attn.k_proj"), nullptr);
  EXPECT_EQ(c.group_for("model.layers.1.self_attn.v_proj"), nullptr);  // not targeted
  EXPECT_NE(c.group_for("model.layers.1.mlp.down_proj"), nullptr);     // by name
  EXPECT_EQ(c.group_for("model.layers.1.mlp.up_proj"), nullptr);
  EXPECT_EQ(c.describe()["config_groups"]["group_0"]["weights"]["scales"], "channel");
}

}  // namespace
}  // namespace qeval
