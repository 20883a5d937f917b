// What every CPU benchmark in bench/ prints or times the same way: the load average and the CPU's
// SIMD flags beside each figure, and the median of repeated runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace qeval::bench {

// "/proc/loadavg"'s first three fields: "1.02 0.87 0.66".
inline std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// The SIMD features that decide the CPU kernels, as /proc/cpuinfo names them (those present),
// printed beside every speed figure.
inline std::string cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, present;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::stringstream words(line.substr(line.find(':') + 1));
    std::vector<std::string> have;
    for (std::string w; words >> w;) have.push_back(w);
    for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8"})
      if (std::find(have.begin(), have.end(), f) != have.end()) present += (present.empty() ? "" : " ") + std::string(f);
    break;
  }
  return present.empty() ? "none of avx2/fma/avx512" : present;
}

// The median wall time of `reps` calls of fn, in seconds.
inline double median_seconds(const std::function<void()>& fn, int reps) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace qeval::bench
