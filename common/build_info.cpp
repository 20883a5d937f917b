#include "common/build_info.h"

#include <ATen/Parallel.h>
#include <torch/version.h>
#include <fstream>
#include <sys/utsname.h>
#include <thread>

#ifndef QEVAL_VERSION
#define QEVAL_VERSION "0.0.0"
#endif
#ifndef QEVAL_GIT_COMMIT
#define QEVAL_GIT_COMMIT "unknown"
#endif

namespace qeval {

std::string version() { return QEVAL_VERSION; }
std::string git_commit() { return QEVAL_GIT_COMMIT; }

static std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

nlohmann::json host_info() {
  utsname u{};
  uname(&u);
  return {
      {"cpu", cpu_model()},
      {"hardware_threads", std::thread::hardware_concurrency()},
      {"torch_threads", at::get_num_threads()},
      {"libtorch", std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                       std::to_string(TORCH_VERSION_PATCH)},
      {"os", std::string(u.sysname) + " " + u.release},
      {"machine", u.machine},
  };
}

}  // namespace qeval
