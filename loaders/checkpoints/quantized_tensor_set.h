// The tensors of a Hugging Face folder whose linears are stored quantised (quantization_config.h),
// seen as the plain float32 tensors the weight mappings of hf_checkpoint.cpp take: take(module +
// ".weight", {out, in}) finds the module's stored tensors and dequantises them with the codecs of
// quant/formats, returning [out, in] float32. Per method, for module m (names as the libraries
// save them):
//
//   compressed-tensors  pack-quantized        m.weight_packed, m.weight_scale, m.weight_shape,
//                                             [m.weight_zero_point], [m.weight_g_idx]
//                       int- / naive-quantized m.weight (int8), m.weight_scale, [m.weight_zero_point]
//                       float-quantized       m.weight (F8_E4M3), m.weight_scale
//                       nvfp4-pack-quantized  m.weight_packed, m.weight_scale (F8_E4M3),
//                                             m.weight_global_scale
//   gptq                m.qweight, m.qzeros, m.scales, [m.g_idx]
//   awq                 m.qweight, m.qzeros, m.scales
//   bitsandbytes        4-bit: m.weight (uint8), m.weight.absmax, m.weight.quant_map,
//                       [m.weight.nested_absmax, m.weight.nested_quant_map],
//                       m.weight.quant_state.bitsandbytes__{nf4,fp4} (the QuantState JSON as bytes);
//                       8-bit: m.weight (int8), m.SCB (m.weight_format is taken and ignored)
//   fp8                 m.weight (F8_E4M3), m.weight_scale_inv
//
// Modules the config ignores or does not target, and modules stored plain (a GPTQ lm_head, a
// bitsandbytes skip), read as plain tensors. A module the config quantises whose tensors are
// absent is an error naming the config file, the module and the tensor. Every stored tensor is
// read through the set, so the weights hash covers the stored bytes as read; in the set's
// header-only mode the stored tensors are taken (their spans recorded) and an empty meta tensor
// returned.
#pragma once

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loaders/checkpoints/quantization_config.h"
#include "loaders/checkpoints/safetensors_set.h"

namespace qeval {

class QuantizedTensorSet {
 public:
  // Without a config every take is the set's own.
  QuantizedTensorSet(SafetensorsSet& set, std::optional<QuantizationConfig> config)
      : set_(set), config_(std::move(config)) {}

  const std::optional<QuantizationConfig>& config() const { return config_; }
  bool has(const std::string& name) const;
  // A tensor of the activation quantisation the config declares: compressed-tensors'
  // m.input_scale, m.input_zero_point, m.input_global_scale (NVFP4 saves the last for every
  // linear) where m's group has input_activations. qeval evaluates the weights alone, so no plan
  // reads them; the reader lists them as ignored instead of refusing them as left over.
  bool is_declared_activation_tensor(const std::string& name) const;
  at::Tensor take(const std::string& name, const std::vector<std::int64_t>& shape);
  at::Tensor take_rows(const std::string& name, const std::vector<std::int64_t>& shape, std::int64_t begin,
                       std::int64_t count) {
    return set_.take_rows(name, shape, begin, count);
  }
  // Modules taken so far (header-only takes included), counted by stored format
  // ("gptq gptq 4-bit g16": 14).
  std::map<std::string, std::int64_t> dequantised() const;

 private:
  // The module's stored form, or "" when it is stored plain.
  std::string stored_form(const std::string& module) const;
  at::Tensor dequantise(const std::string& module, const std::string& form, std::int64_t N, std::int64_t K);
  at::Tensor stored(const std::string& module, const std::string& field);  // must be there
  at::Tensor optional_stored(const std::string& module, const std::string& field);

  SafetensorsSet& set_;
  std::optional<QuantizationConfig> config_;
  std::string file_;  // the weights file of the last stored tensor taken, for the codecs' errors
  std::map<std::string, std::string> forms_;  // module → its stored format, as dequantised() counts it
};

}  // namespace qeval
