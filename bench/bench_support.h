// What every CPU benchmark in bench/ prints or times the same way: the load average beside each
// figure, and the median of repeated runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
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
