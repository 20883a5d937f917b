// One libFuzzer target per reader: this file is compiled once per harness in fuzz/harnesses.h,
// with QEVAL_FUZZ_HARNESS naming it (fuzz/CMakeLists.txt). qeval::Error is the readers' clean
// refusal; every other exception escapes and is reported as a crash.
#include <cstddef>
#include <cstdint>

#include "common/error.h"
#include "fuzz/run.h"

#define QEVAL_STRINGIFY2(x) #x
#define QEVAL_STRINGIFY(x) QEVAL_STRINGIFY2(x)

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  qeval::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto& run = qeval::fuzz::harness(QEVAL_STRINGIFY(QEVAL_FUZZ_HARNESS));
  try {
    run(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const qeval::Error&) {
  }
  return 0;
}
