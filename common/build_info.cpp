#include "common/build_info.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sched.h>
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

// OpenBLAS's thread count, looked up in the process (null where the BLAS is not OpenBLAS).
static nlohmann::json blas_threads() {
  if (auto get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))) return get();
  return nullptr;
}

// The cores this process may run on (sched_getaffinity): the default of --threads.
static int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

nlohmann::json host_info() {
  utsname u{};
  uname(&u);
  return {
      {"cpu", cpu_model()},
      {"hardware_threads", std::thread::hardware_concurrency()},
      {"torch_threads", at::get_num_threads()},
      {"blas_threads", blas_threads()},
      {"cores_available", cores_available()},
      {"libtorch", std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                       std::to_string(TORCH_VERSION_PATCH)},
      {"os", std::string(u.sysname) + " " + u.release},
      {"machine", u.machine},
  };
}

}  // namespace qeval
