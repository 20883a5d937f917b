// Test helpers: where the shared data lives, temporary folders, and tensor comparisons that
// print the index, got, expected and the largest error.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/error.h"

namespace qeval::test {

// ../shared/data (or $QEVAL_DATA_DIR). Fails the test, never skips, when it is missing.
std::filesystem::path data_dir();
std::filesystem::path data_path(const std::string& relative);
// A path inside this repository (configs/, tests/oracle/, ...), wherever the test file sits.
std::filesystem::path repo_path(const std::string& relative);

// A fresh empty folder under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Writes bytes to a file (for building corrupt inputs).
void write_bytes(const std::filesystem::path& path, const std::string& bytes);

// Passes when |got - expected| <= atol + rtol * |expected| everywhere; otherwise reports the
// worst index with both values.
::testing::AssertionResult tensors_close(const at::Tensor& got, const at::Tensor& expected, double atol,
                                         double rtol = 0.0);
::testing::AssertionResult tensors_equal(const at::Tensor& got, const at::Tensor& expected);

// Passes when f() throws qeval::Error whose message contains every one of `parts`; reports the
// message otherwise (or that nothing, or something else, was thrown).
template <typename F>
::testing::AssertionResult throws_with(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& part : parts)
      if (message.find(part) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << message << "\" lacks \"" << part << "\"";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw something other than qeval::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace qeval::test
