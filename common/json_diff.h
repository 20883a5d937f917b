// Where two JSON values differ, for messages that say why two records (or a record and its series)
// do not match: "protocol.seq_len: 256 vs 512".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qeval {

// Human-readable list of where two JSON values differ ("protocol.seq_len: 256 vs 512"), at most
// `limit` entries.
std::vector<std::string> json_differences(const nlohmann::json& a, const nlohmann::json& b,
                                          std::size_t limit = 8);

}  // namespace qeval
