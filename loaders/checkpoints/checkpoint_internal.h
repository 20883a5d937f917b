// Helpers shared by the checkpoint loaders in loaders/ (not a public interface).
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"

namespace qeval {

// Parses a JSON file; a syntax error names the file and the position.
nlohmann::json read_json_file(const std::filesystem::path& path);

// A llama2.c v0 header (7 int32) read and validated: its config, whether the classifier is the
// embedding, and how many floats the file must hold after it (checked against the file's size).
struct Llama2cHeader {
  std::array<std::int32_t, 7> words{};
  ModelConfig config;
  bool shared_classifier = true;
  std::uint64_t floats = 0;
};
Llama2cHeader read_llama2c_header(const std::filesystem::path& path);

// "[a, b, c]" for messages.
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace qeval
