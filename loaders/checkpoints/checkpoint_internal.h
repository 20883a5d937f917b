// Helpers shared by the checkpoint loaders in loaders/ (not a public interface).
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qeval {

// Parses a JSON file; a syntax error names the file and the position.
nlohmann::json read_json_file(const std::filesystem::path& path);

// The checkpoint's weights hash (LoadedCheckpoint::weights_hash): for one file, XXH3 of its
// bytes (so `xxh64sum`-style tools can check it); for several, XXH3 over "filename\0hash\n"
// of each file in filename order, so shard order on disk never changes the value.
std::string hash_weight_files(std::vector<std::filesystem::path> files);

// "[a, b, c]" for messages.
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace qeval
