// What memory this process may use, read from the system: /proc/meminfo's MemAvailable, the
// cgroup's limit and usage (v2 memory.max / memory.current, or v1's limit_in_bytes /
// usage_in_bytes), the address-space limit (RLIMIT_AS), and the process's own resident and
// virtual size. The memory planner (eval/memory_plan.h) compares its plans against it.
#pragma once

#include <cstdint>
#include <string>

namespace qeval {

struct HostMemory {
  std::int64_t mem_available = -1;    // /proc/meminfo MemAvailable; -1 when unknown
  std::int64_t cgroup_limit = -1;     // -1: none
  std::int64_t cgroup_usage = -1;
  std::int64_t address_space_limit = -1;  // RLIMIT_AS soft limit; -1: unlimited
  std::int64_t rss = 0;               // this process, now
  std::int64_t virtual_size = 0;

  // The most this process's resident memory may grow to, and what decides it, in words
  // ("MemAvailable 22.1 GiB", "cgroup limit 8 GiB", ...).
  std::int64_t usable() const;
  std::string usable_source() const;
};

HostMemory read_host_memory();

// Peak resident set size of this process so far (getrusage ru_maxrss), bytes.
std::int64_t peak_rss();

}  // namespace qeval
