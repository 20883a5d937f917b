#include "fuzz/run.h"

#include <ATen/Parallel.h>

#include "common/error.h"
#include "fuzz/harnesses.h"

namespace qeval::fuzz {

void init() { at::set_num_threads(1); }

const std::function<void(std::string_view)>& harness(const std::string& name) {
  const auto it = harnesses().find(name);
  QEVAL_CHECK(it != harnesses().end(), "fuzz: no harness named {}", name);
  return it->second;
}

}  // namespace qeval::fuzz
