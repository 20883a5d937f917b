#include "common/host_memory.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <limits>
#include <sstream>

#include "common/sizes.h"

namespace qeval {
namespace {

std::int64_t read_integer_file(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    const long long v = std::stoll(text);
    // v1 reports "no limit" as a huge page-aligned number.
    return v <= 0 || v >= (std::numeric_limits<std::int64_t>::max() / 2) ? -1 : static_cast<std::int64_t>(v);
  } catch (...) {
    return -1;
  }
}

std::int64_t meminfo_kib(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream fields(line.substr(key.size() + 1));
      long long kib = -1;
      fields >> kib;
      return kib < 0 ? -1 : static_cast<std::int64_t>(kib) * 1024;
    }
  return -1;
}

std::pair<std::int64_t, std::int64_t> statm() {
  std::ifstream in("/proc/self/statm");
  long long size = 0, resident = 0;
  in >> size >> resident;
  const long page = ::sysconf(_SC_PAGESIZE);
  return {static_cast<std::int64_t>(size) * page, static_cast<std::int64_t>(resident) * page};
}

}  // namespace

HostMemory read_host_memory() {
  HostMemory m;
  m.mem_available = meminfo_kib("MemAvailable");
  m.cgroup_limit = read_integer_file("/sys/fs/cgroup/memory.max");
  if (m.cgroup_limit > 0) {
    m.cgroup_usage = read_integer_file("/sys/fs/cgroup/memory.current");
  } else {
    m.cgroup_limit = read_integer_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    if (m.cgroup_limit > 0) m.cgroup_usage = read_integer_file("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    m.address_space_limit = static_cast<std::int64_t>(limit.rlim_cur);
  std::tie(m.virtual_size, m.rss) = statm();
  return m;
}

std::int64_t HostMemory::usable() const {
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  if (mem_available >= 0) best = std::min(best, rss + mem_available);
  if (cgroup_limit > 0) best = std::min(best, rss + std::max<std::int64_t>(cgroup_limit - std::max<std::int64_t>(cgroup_usage, 0), 0));
  // The address space also holds the libraries' mappings and reservations that are never resident:
  // what is left of it is what may still be allocated.
  if (address_space_limit > 0) best = std::min(best, rss + std::max<std::int64_t>(address_space_limit - virtual_size, 0));
  return best;
}

std::string HostMemory::usable_source() const {
  const std::int64_t u = usable();
  if (address_space_limit > 0 && u == rss + std::max<std::int64_t>(address_space_limit - virtual_size, 0))
    return fmt::format("address-space limit {} (ulimit -v), {} of it mapped", format_bytes(address_space_limit),
                       format_bytes(virtual_size));
  if (cgroup_limit > 0 && u == rss + std::max<std::int64_t>(cgroup_limit - std::max<std::int64_t>(cgroup_usage, 0), 0))
    return fmt::format("cgroup limit {}, {} used", format_bytes(cgroup_limit), format_bytes(cgroup_usage));
  if (mem_available >= 0) return fmt::format("MemAvailable {} + this process's {}", format_bytes(mem_available), format_bytes(rss));
  return "unknown (no /proc/meminfo)";
}

std::int64_t peak_rss() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace qeval
