// The message of the qeval::Error a call throws ("no error" when it throws none), for the
// bad-input tests of the checkpoint codecs.
#pragma once

#include <string>

#include "common/error.h"

namespace qeval::test {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace qeval::test
