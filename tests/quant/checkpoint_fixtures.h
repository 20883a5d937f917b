// The quantised-checkpoint fixtures (tests/quant/fixtures/quantized_checkpoints/, written by
// tests/oracle/make_quantized_checkpoint_fixtures.py with each library): one safetensors file per
// case holding the stored tensors, `expected` (the library's dequantisation in float32) and the
// case's parameters as metadata.
#pragma once

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "loaders/checkpoints/safetensors.h"
#include "tests/support/test_data.h"

namespace qeval::test {

struct CheckpointCase {
  std::string name;
  std::map<std::string, at::Tensor> tensors;
  nlohmann::json meta;  // every metadata value parsed as JSON where it is JSON, else a string
  at::Tensor get(const std::string& field) const {
    auto it = tensors.find(field);
    return it == tensors.end() ? at::Tensor() : it->second;
  }
  std::int64_t N() const { return meta.at("N").get<std::int64_t>(); }
  std::int64_t K() const { return meta.at("K").get<std::int64_t>(); }
};

// Every case whose file name starts with `prefix`, in name order.
inline std::vector<CheckpointCase> checkpoint_cases(const std::string& prefix) {
  namespace fs = std::filesystem;
  const fs::path dir = repo_path("tests/quant/fixtures/quantized_checkpoints");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors" && e.path().filename().string().rfind(prefix, 0) == 0) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<CheckpointCase> out;
  for (const auto& f : files) {
    CheckpointCase c;
    c.name = f.stem().string();
    c.tensors = read_safetensors(f);
    const SafetensorsFile file(f);  // held: metadata() refers into it
    for (const auto& [k, v] : file.metadata()) {
      const nlohmann::json parsed = nlohmann::json::parse(v, nullptr, false);
      c.meta[k] = parsed.is_discarded() ? nlohmann::json(v) : parsed;
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Bit-for-bit equality of two float32 tensors (NaN equal to the same NaN bits, −0 ≠ +0 unless
// `zero_sign_free`): the number of differing values, the first one shown with its index, and the
// largest |difference|.
inline ::testing::AssertionResult bits_equal(const at::Tensor& got, const at::Tensor& expected, bool zero_sign_free = false) {
  if (got.sizes() != expected.sizes())
    return ::testing::AssertionFailure() << "shape " << got.sizes() << " vs expected " << expected.sizes();
  const at::Tensor g = got.contiguous(), e = expected.contiguous();
  const float *pg = g.data_ptr<float>(), *pe = e.data_ptr<float>();
  std::int64_t differ = 0, first = -1;
  double max_diff = 0;
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    if (std::memcmp(pg + i, pe + i, 4) == 0 || (zero_sign_free && pg[i] == 0.0f && pe[i] == 0.0f)) continue;
    if (first < 0) first = i;
    ++differ;
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(pg[i]) - pe[i]));
  }
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << fmt::format("{} of {} values differ; first at flat index {}: got {:a}, expected {:a}; "
                                                      "largest |difference| {}",
                                                      differ, g.numel(), first, pg[first], pe[first], max_diff);
}

}  // namespace qeval::test
