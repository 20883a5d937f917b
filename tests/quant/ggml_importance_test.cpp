// llama.cpp's quantisers with an importance matrix (quant/formats/ggml/quants.h, `importance`):
//   * GgmlImportanceFixtures: against llama.cpp itself, byte for byte, on rows and per-column
//     weights that tests/oracle/make_ggml_quant_fixtures.py passed to libggml's
//     ggml_quantize_chunk(type, ..., imatrix) (llama-cpp-python 0.3.36, llama.cpp 0c1e57098) into
//     tests/quant/fixtures/ggml_quants_importance_llamacpp.json: every type, weights spread over
//     2^±20 with zeros, all ones, all zeros, zero runs of 16; large cases as digests.
//   * GgmlImportance: the weighting is used (bytes differ from the plain path, and all-ones
//     weights are not the plain path either, as in ggml), Q8_0 and MXFP4 ignore it, the ATen
//     wrappers (one importance row for all rows, or one per group of rows: experts) and their errors.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/files.h"
#include "quant/formats/ggml/quants.h"
#include "tests/quant/ggml_fixture_util.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> quantize_with(GgmlType t, const std::vector<float>& x, std::int64_t row_length,
                                        const float* importance) {
  const GgmlQuantType& q = ggml_quant_type(t);
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / row_length;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * (row_length / q.block_elements) * q.block_bytes));
  quantize_rows_ggml(t, x.data(), out.data(), rows, row_length, importance);
  return out;
}

std::vector<std::uint8_t> bytes_of(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  const auto* p = c.data_ptr<std::uint8_t>();
  return {p, p + c.numel()};
}

TEST(GgmlImportanceFixtures, EveryTypeMatchesLlamaCppByteForByte) {
  const fs::path path = test::repo_path("tests/quant/fixtures/ggml_quants_importance_llamacpp.json");
  const nlohmann::json j = nlohmann::json::parse(read_file(path));
  EXPECT_EQ(j.at("llama_cpp_commit").get<std::string>().substr(0, 9), "0c1e57098");
  std::map<std::string, int> stored_cases, digest_cases;
  std::map<std::string, std::map<std::string, int>> importance_kinds;
  std::size_t stored_bytes = 0, digest_values = 0;
  for (const auto& c : j.at("cases")) {
    const std::string type = c.at("type"), kind = c.at("kind"), importance = c.at("importance");
    const std::int64_t rows = c.at("rows"), row_length = c.at("row_length");
    SCOPED_TRACE(fmt::format("{} {} {}x{} seed {} scale 2^{} importance {} seed {}", type, kind, rows, row_length,
                             c.at("seed").get<std::uint64_t>(), c.at("scale_exp").get<int>(), importance,
                             c.at("importance_seed").get<std::uint64_t>()));
    const GgmlQuantType& t = ggml_quant_type(ggml_quant_type_from_name(type));
    const std::vector<float> x = test::fixture_rows(kind, c.at("seed"), rows * row_length, c.at("scale_exp"));
    const std::vector<float> w = test::fixture_importance(importance, c.at("importance_seed"), row_length);
    const std::vector<std::uint8_t> got = quantize_with(t.type, x, row_length, w.data());
    if (c.contains("bytes")) {
      const std::vector<std::uint8_t> expected = test::from_hex(c.at("bytes"));
      EXPECT_TRUE(test::bytes_equal(got, expected, t, &x));
      ++stored_cases[type];
      stored_bytes += expected.size();
    } else {
      EXPECT_EQ(got.size(), c.at("n_bytes").get<std::size_t>());
      EXPECT_EQ(test::fnv1a64(got), c.at("fnv1a64").get<std::string>()) << "the bytes differ from llama.cpp's";
      ++digest_cases[type];
      digest_values += x.size();
    }
    ++importance_kinds[type][importance];
  }
  for (const auto& t : ggml_quant_types()) {
    EXPECT_GE(stored_cases[t.name], 11) << t.name;
    EXPECT_GE(digest_cases[t.name], 2) << t.name;
    for (const char* kind : {"spread", "mild", "blockzeros", "ones", "zeros"})
      EXPECT_GE(importance_kinds[t.name][kind], 1) << t.name << " has no case with importance " << kind;
  }
  EXPECT_GT(stored_bytes, 10000u);
  RecordProperty("stored_bytes_compared", static_cast<int>(stored_bytes));
  RecordProperty("values_compared_by_digest", static_cast<int>(digest_values));
}

// Without importance, Q8_0 and MXFP4 already have fixtures (ggml_quants_llamacpp.json); with it,
// ggml quantises them the same way, and so does qeval.
TEST(GgmlImportance, Q8_0AndMxfp4IgnoreIt) {
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::MXFP4}) {
    const GgmlQuantType& t = ggml_quant_type(type);
    SCOPED_TRACE(t.name);
    EXPECT_FALSE(ggml_type_uses_importance(type));
    const std::vector<float> x = test::fixture_rows("gauss", 7, 4 * 256, -2);
    const std::vector<float> w = test::fixture_importance("spread", 8, 256);
    EXPECT_TRUE(test::bytes_equal(quantize_with(type, x, 256, w.data()), quantize_with(type, x, 256, nullptr), t));
  }
}

// A dropped weighting (importance accepted but not used) would give the plain bytes: every type that
// reads importance gives other bytes with it, with two different weightings, and with all-ones
// weights (ggml's weighted path with weights 1 is not its plain path: other searches, other
// weights, e.g. Q6_K's x² against 1, Q4_0's max/-8 against an 18-scale search). The all-ones bytes
// themselves are llama.cpp's (the fixture's "ones" cases).
TEST(GgmlImportance, WeightingChangesTheBytesForEveryTypeThatReadsIt) {
  for (const auto& t : ggml_quant_types()) {
    if (!ggml_type_uses_importance(t.type)) continue;
    SCOPED_TRACE(t.name);
    const std::int64_t k = 1024;
    const std::vector<float> x = test::fixture_rows("gauss", 11, 8 * k, -3);
    const std::vector<float> spread = test::fixture_importance("spread", 12, k);
    const std::vector<float> other = test::fixture_importance("spread", 13, k);
    const std::vector<float> ones(static_cast<std::size_t>(k), 1.0f);
    const auto plain = quantize_with(t.type, x, k, nullptr);
    const auto weighted = quantize_with(t.type, x, k, spread.data());
    const auto weighted_other = quantize_with(t.type, x, k, other.data());
    const auto all_ones = quantize_with(t.type, x, k, ones.data());
    auto blocks_differing = [&](const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
      int n = 0;
      for (std::size_t i = 0; i < a.size(); i += static_cast<std::size_t>(t.block_bytes))
        n += std::memcmp(a.data() + i, b.data() + i, static_cast<std::size_t>(t.block_bytes)) != 0;
      return n;
    };
    const int n_blocks = static_cast<int>(plain.size()) / t.block_bytes;
    // Most blocks, not just one: the weights reach every block.
    EXPECT_GT(blocks_differing(weighted, plain), n_blocks / 2) << "of " << n_blocks;
    EXPECT_GT(blocks_differing(weighted, weighted_other), n_blocks / 2) << "of " << n_blocks;
    EXPECT_GT(blocks_differing(all_ones, plain), 0) << "of " << n_blocks;
    // Scaling every weight by a power of two changes no byte: the searches compare weighted sums.
    std::vector<float> doubled = spread;
    for (float& v : doubled) v *= 2.0f;
    EXPECT_TRUE(test::bytes_equal(quantize_with(t.type, x, k, doubled.data()), weighted, t));
  }
}

TEST(GgmlImportance, AtenWrappersEqualTheRows) {
  const std::int64_t n = 6, k = 512;
  const std::vector<float> xs = test::fixture_rows("gauss", 21, n * k, 0);
  const at::Tensor w = at::from_blob(const_cast<float*>(xs.data()), {n, k}, at::kFloat).clone();
  const std::vector<float> q0 = test::fixture_importance("spread", 22, k);
  const std::vector<float> q1 = test::fixture_importance("mild", 23, k);
  const at::Tensor imp = at::from_blob(const_cast<float*>(q0.data()), {k}, at::kFloat).clone();
  at::Tensor experts = at::empty({2, k}, at::kFloat);
  experts[0].copy_(imp);
  experts[1].copy_(at::from_blob(const_cast<float*>(q1.data()), {k}, at::kFloat));
  for (const auto& t : ggml_quant_types()) {
    SCOPED_TRACE(t.name);
    // [K]: every row with the same weights.
    const auto rows = quantize_with(t.type, xs, k, q0.data());
    EXPECT_TRUE(test::bytes_equal(bytes_of(quantize_ggml(w, t.type, imp)), rows, t));
    // [E, K]: rows 0..2 with q0, rows 3..5 with q1 (a 3-D expert tensor's slices, as llama-quantize).
    std::vector<float> first(xs.begin(), xs.begin() + 3 * k), second(xs.begin() + 3 * k, xs.end());
    std::vector<std::uint8_t> expected = quantize_with(t.type, first, k, q0.data());
    const auto tail = quantize_with(t.type, second, k, q1.data());
    expected.insert(expected.end(), tail.begin(), tail.end());
    const at::Tensor by_expert = quantize_ggml(w, t.type, experts);
    EXPECT_TRUE(test::bytes_equal(bytes_of(by_expert), expected, t));
    // The round trip is the dequantised blocks, bit for bit.
    at::Tensor dq = at::empty({n, k}, at::kFloat);
    dequantize_rows_ggml(t.type, by_expert.data_ptr<std::uint8_t>(), dq.data_ptr<float>(), n, k);
    EXPECT_TRUE(at::equal(quantize_dequantize_ggml(w, t.type, experts), dq));
    // A non-contiguous weight is read as its values.
    EXPECT_TRUE(test::bytes_equal(bytes_of(quantize_ggml(w.t().contiguous().t(), t.type, imp)), rows, t));
  }
}

TEST(GgmlImportance, WrappersRefuseBadImportanceNamingWhatIsWrong) {
  const at::Tensor w = at::ones({4, 256}, at::kFloat);
  EXPECT_TRUE(test::throws_with([&] { quantize_ggml(w, GgmlType::Q4_K, at::ones({128}, at::kFloat)); },
                                {"importance has 128 columns", "K = 256"}));
  EXPECT_TRUE(test::throws_with([&] { quantize_ggml(w, GgmlType::Q4_K, at::ones({3, 256}, at::kFloat)); },
                                {"3 rows", "N = 4"}));
  EXPECT_TRUE(test::throws_with([&] { quantize_ggml(w, GgmlType::Q4_K, at::ones({256}, at::kDouble)); },
                                {"float32 importance", "Double"}));
  EXPECT_TRUE(test::throws_with([&] { quantize_ggml(w, GgmlType::Q4_K, at::ones({1, 1, 256}, at::kFloat)); },
                                {"[K] or [E, K]", "3 dimensions"}));
  at::Tensor bad = at::ones({256}, at::kFloat);
  bad[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(test::throws_with([&] { quantize_dequantize_ggml(w, GgmlType::Q4_0, bad); },
                                {"quantize_dequantize_ggml", "not finite", "[0, 17]"}));
}

}  // namespace
}  // namespace qeval
