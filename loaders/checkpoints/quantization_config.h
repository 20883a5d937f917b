// The quantisation settings of a Hugging Face folder: config.json's `quantization_config`, or a
// `quantize_config.json` beside it (older AutoGPTQ / AutoAWQ folders). What each method writes:
//
//   compressed-tensors  quant_method "compressed-tensors", format (pack-quantized, int-quantized,
//   (0.20)              naive-quantized, float-quantized, nvfp4-pack-quantized; a group may name its
//                       own), config_groups {name: {targets, weights, input_activations, format}},
//                       ignore [module names or "re:" regexes]. weights: num_bits, type (int /
//                       float), symmetric, strategy (tensor / channel / group / block / tensor_group),
//                       group_size, block_structure [bn, bk], actorder.
//                       A target is a class name ("Linear": every linear module qeval maps) or
//                       "re:<regex>" matched from the start of the module name (re.match).
//   gptq                bits ∈ {2, 3, 4, 8}, group_size (−1: one group), desc_act, sym,
//                       checkpoint_format gptq (v1) / gptq_v2 (GPTQModel's "format" key too)
//   awq                 bits 4, group_size, zero_point, version gemm (gemv is refused: its packing is
//                       another layout)
//   bitsandbytes        load_in_4bit / load_in_8bit, bnb_4bit_quant_type nf4 / fp4,
//                       bnb_4bit_use_double_quant, llm_int8_skip_modules; the per-tensor
//                       quant_state JSON tensors carry the blocksizes and the nested offset
//   fp8                 weight_block_size [bn, bk], activation_scheme (dynamic / static),
//                       modules_to_not_convert
//
// Every error names the file, the key path (e.g. quantization_config.config_groups.group_0.weights.
// num_bits), what was expected and what was found.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "quant/formats/bitsandbytes.h"
#include "quant/formats/gptq.h"
#include "quant/formats/scale_layout.h"

namespace qeval {

enum class QuantMethod { compressed_tensors, gptq, awq, bitsandbytes, fp8 };
const char* quant_method_name(QuantMethod m);

// compressed-tensors' QuantizationArgs for the weights of one config group.
struct CtWeightArgs {
  int num_bits = 8;
  std::string type = "int";  // "int" or "float"
  bool symmetric = true;
  std::string strategy = "tensor";  // tensor, channel, group, block, tensor_group
  std::int64_t group_size = 0;
  std::vector<std::int64_t> block_structure;  // block: [bn, bk]
  std::string actorder;                       // "", "group", "weight", "static", "dynamic"
  ScaleLayout layout() const;
};

struct CtGroup {
  std::string name;
  std::vector<std::string> targets;
  std::string format;  // the group's own format, else the config's
  CtWeightArgs weights;
  nlohmann::json input_activations;  // null when weights only
};

struct QuantizationConfig {
  QuantMethod method = QuantMethod::gptq;
  std::string file;    // where it was read (config.json or quantize_config.json)
  std::string format;  // compressed-tensors: its format; gptq: gptq / gptq_v2; awq: gemm; bitsandbytes:
                       // nf4 / fp4 / int8; fp8: float-quantized
  int bits = 0;
  std::int64_t group_size = 0;  // gptq / awq; −1: one group over K
  // compressed-tensors
  std::vector<CtGroup> groups;
  std::vector<std::string> ignore;
  // gptq / awq
  bool desc_act = false, sym = true, zero_point = true;
  GptqFormat gptq_format = GptqFormat::v1;
  // bitsandbytes
  BnbQuantType bnb_quant_type = BnbQuantType::nf4;
  bool bnb_double_quant = false;
  // fp8
  std::int64_t block_rows = 0, block_cols = 0;
  std::string activation_scheme;
  std::vector<std::string> not_converted;  // bitsandbytes llm_int8_skip_modules, fp8 modules_to_not_convert

  // compressed-tensors: the group whose targets match the linear module `module` (e.g.
  // "model.layers.0.mlp.up_proj") and that `ignore` does not exclude; nullptr otherwise.
  const CtGroup* group_for(const std::string& module) const;
  // Whether the config asks for `module` (a linear) to be stored quantised; for gptq / awq every
  // linear is, but the stored tensors decide (a plain lm_head stays plain).
  bool quantises(const std::string& module) const;
  // The record's summary: method, format, bits, group_size, (desc_act, sym, ...), activations.
  nlohmann::json describe() const;
};

// Parses one quantization_config object; `file` and `key` ("quantization_config") name it in errors.
QuantizationConfig parse_quantization_config(const nlohmann::json& qc, const std::string& file, const std::string& key);

// The folder's settings: config.json's quantization_config (`config` is config.json, parsed), else
// quantize_config.json in `dir`; nullopt for an unquantised folder.
std::optional<QuantizationConfig> read_quantization_config(const nlohmann::json& config, const std::filesystem::path& dir);

}  // namespace qeval
