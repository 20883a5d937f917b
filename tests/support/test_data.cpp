#include "tests/support/test_data.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ftw.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "common/error.h"
#include "common/files.h"

namespace qeval::test {

std::filesystem::path data_dir() {
  try {
    return resolve_data_dir();
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
    throw;
  }
}

std::filesystem::path data_path(const std::string& relative) {
  auto p = data_dir() / relative;
  if (!std::filesystem::exists(p)) ADD_FAILURE() << "missing shared data file " << p;
  return p;
}

std::filesystem::path repo_path(const std::string& relative) {
  // This file is tests/support/test_data.cpp.
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / relative;
}

TempDir::TempDir() {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() / fmt::format("qeval-test-{:x}{:x}", rd(), rd());
  std::filesystem::create_directories(path_);
}

namespace {
int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }
}  // namespace

TempDir::~TempDir() {
  // nftw rather than std::filesystem::remove_all: PyTorch's CUDA wheel exports its own copy of
  // std::filesystem, which a binary linked against it binds to and which crashes in remove_all
  // (seen on the H200 machine, results/gpu/2026-11-26-h200-issue32).
  ::nftw(path_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

static std::string index_string(const at::Tensor& t, std::int64_t flat) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(t.dim()));
  for (std::int64_t d = t.dim() - 1; d >= 0; --d) {
    idx[static_cast<std::size_t>(d)] = flat % t.size(d);
    flat /= t.size(d);
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

::testing::AssertionResult tensors_close(const at::Tensor& got, const at::Tensor& expected, double atol, double rtol) {
  if (got.sizes() != expected.sizes())
    return ::testing::AssertionFailure() << "shape " << got.sizes() << " != expected " << expected.sizes();
  at::Tensor g = got.to(at::kDouble).contiguous().reshape({-1});
  at::Tensor e = expected.to(at::kDouble).contiguous().reshape({-1});
  if (g.numel() == 0) return ::testing::AssertionSuccess();
  at::Tensor err = (g - e).abs();
  at::Tensor excess = err - (atol + rtol * e.abs());
  std::int64_t worst = excess.argmax().item<std::int64_t>();
  if (excess[worst].item<double>() <= 0 && !g.isnan().any().item<bool>()) return ::testing::AssertionSuccess();
  std::int64_t bad = (excess > 0).sum().item<std::int64_t>();
  return ::testing::AssertionFailure() << bad << " of " << g.numel() << " elements differ; worst at "
                                       << index_string(got, worst) << ": got " << g[worst].item<double>()
                                       << ", expected " << e[worst].item<double>() << ", |error| "
                                       << err[worst].item<double>() << " (atol " << atol << ", rtol " << rtol
                                       << "), largest |error| " << err.max().item<double>();
}

::testing::AssertionResult tensors_equal(const at::Tensor& got, const at::Tensor& expected) {
  if (got.sizes() != expected.sizes())
    return ::testing::AssertionFailure() << "shape " << got.sizes() << " != expected " << expected.sizes();
  if (got.scalar_type() != expected.scalar_type())
    return ::testing::AssertionFailure() << "dtype " << got.scalar_type() << " != expected " << expected.scalar_type();
  if (at::equal(got, expected)) return ::testing::AssertionSuccess();
  return tensors_close(got, expected, 0.0, 0.0);
}

}  // namespace qeval::test
