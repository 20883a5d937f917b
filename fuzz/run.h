// The light interface the fuzz targets compile against (harnesses.h pulls in LibTorch headers:
// it is compiled once, into qeval_fuzz_harnesses, not once per target).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace qeval::fuzz {

// One thread for LibTorch (one fuzz process per core).
void init();
// The harness of that name from harnesses.h; throws qeval::Error for an unknown name.
const std::function<void(std::string_view)>& harness(const std::string& name);

}  // namespace qeval::fuzz
