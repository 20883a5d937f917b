// What the end-to-end comparisons with llm-compressor on stories260K share
// (gptq_end_to_end_test.cpp, awq_end_to_end_test.cpp): the fixture's windows, the model as qeval
// reads it, and the per-token NLL of the held-out windows.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/evaluator.h"
#include "model/transformer.h"

namespace qeval::test {

// A JSON array of token-id arrays as windows indexed from `first_index` on.
std::vector<Window> windows_of(const nlohmann::json& ids, std::int64_t first_index);

// stories260K.bin from the shared data, read by qeval's llama2.c loader.
Transformer stories260k();

// Per-token NLL of every next-token prediction of each window, concatenated: [windows · (L − 1)] float64.
at::Tensor token_nll(const Transformer& model, const std::vector<Window>& windows);

// The float weight [N, K] of a model's linear `name` (throws when absent or not a float linear).
const at::Tensor& float_weight_of(const Transformer& model, const std::string& name);

// Digit i of a string of hexadecimal digits (the fixtures' 4-bit codes, one digit each).
int hex_digit(const std::string& hex, std::size_t i);

}  // namespace qeval::test
