// What every result record says about the build and the machine it ran on.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace qeval {

std::string version();     // e.g. "0.1.0"
std::string git_commit();  // short hash of the build's commit, or "unknown"
// {cpu, threads, libtorch, cuda, gpu, os}
nlohmann::json host_info();

}  // namespace qeval
