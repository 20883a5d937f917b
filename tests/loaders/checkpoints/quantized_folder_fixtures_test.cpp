// Quantised folders written by the real libraries (tests/loaders/fixtures/quantized_folders/, made
// by tests/oracle/make_quantized_folder_fixtures.py): a tiny random Llama quantised by
// llm-compressor (compressed-tensors pack-quantized GPTQ int4, symmetric and asymmetric;
// float-quantized FP8; int-quantized W8A8; NVFP4) and by bitsandbytes through transformers (nf4,
// double quant), each saved by the library. Each folder's expected.json holds, per Hugging Face
// linear, the library's own dequantisation in float32 as XXH3-64 of its little-endian bytes.
// qeval's ModelReader must open each folder as the library wrote it and read every block linear
// to the same bytes (a difference of 0); a mismatch prints the first values of both.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "loaders/checkpoints/model_reader.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fixtures_dir() { return test::repo_path("tests/loaders/fixtures/quantized_folders"); }

// What the generator writes; a folder missing from the checkout fails, not skips.
const std::vector<std::string> kFolders = {"ct_gptq_w4a16_g32", "ct_gptq_w4a16_asym_g32_actorder", "ct_fp8_dynamic",
                                           "ct_w8a8_int8",      "ct_nvfp4",                        "bnb_nf4_nested",
                                           "awq_gemm_g32",      "gptq_v1_asym_g32_desc_act"};

// qeval's block linears and the Hugging Face Llama module each is read from (hf_checkpoint.cpp's
// mapping: model.layers.{i}. + these).
struct NamedLinear {
  const char* hf;
  const LinearWeights BlockWeights::*field;
};
const NamedLinear kLinears[] = {
    {"self_attn.q_proj", &BlockWeights::q}, {"self_attn.k_proj", &BlockWeights::k},
    {"self_attn.v_proj", &BlockWeights::v}, {"self_attn.o_proj", &BlockWeights::o},
    {"mlp.gate_proj", &BlockWeights::gate}, {"mlp.up_proj", &BlockWeights::up},
    {"mlp.down_proj", &BlockWeights::down},
};

std::string float32_digest(const at::Tensor& w) {
  Hasher h;
  h.update(w.data_ptr(), static_cast<std::size_t>(w.numel()) * sizeof(float));  // little-endian hosts (x86, arm64)
  return h.hex();
}

// Where got and the sample disagree, for the failure message.
std::string sample_report(const at::Tensor& got, const json& expected) {
  const json& first = expected.at("first");
  const float* g = got.data_ptr<float>();
  std::string out = fmt::format("sum: got {:.9g}, expected {:.9g}\n", got.to(at::kDouble).sum().item<double>(),
                                expected.at("sum").get<double>());
  for (std::size_t i = 0; i < first.size() && static_cast<std::int64_t>(i) < got.numel(); ++i) {
    const float e = first[i].get<float>();
    out += fmt::format("  [{}] got {:.9g}, expected {:.9g}{}\n", i, g[i], e, g[i] == e ? "" : "  <- differs");
  }
  return out;
}

class QuantizedFolderFixtures : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizedFolderFixtures, EveryLinearIsTheLibrarysDequantisation) {
  const std::string& name = GetParam();
  {
    const fs::path dir = fixtures_dir() / name;
    ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing (tests/oracle/make_quantized_folder_fixtures.py writes it)";
    const json expected = json::parse(read_file(dir / "expected.json"));
    const json& linears = expected.at("linears");
    std::unique_ptr<ModelReader> reader;
    try {
      reader = open_checkpoint(dir);
    } catch (const Error& e) {
      FAIL() << "qeval refuses the folder " << expected.at("library").at("writer") << " wrote: " << e.what();
    }
    ASSERT_EQ(reader->config().n_layers, 2);
    std::set<std::string> seen;
    for (std::int64_t layer = 0; layer < reader->config().n_layers; ++layer) {
      const BlockWeights block = reader->block(layer);
      for (const NamedLinear& l : kLinears) {
        const std::string module = fmt::format("model.layers.{}.{}", layer, l.hf);
        SCOPED_TRACE(module);
        ASSERT_TRUE(linears.contains(module)) << "expected.json has no entry for " << module;
        const json& e = linears.at(module);
        seen.insert(module);
        const at::Tensor got = (block.*(l.field)).weight.contiguous();
        ASSERT_EQ(got.scalar_type(), at::kFloat);
        ASSERT_EQ(got.sizes().vec(), e.at("shape").get<std::vector<std::int64_t>>());
        EXPECT_EQ(float32_digest(got), e.at("xxh3_64").get<std::string>())
            << "float32 bytes differ from " << expected.at("library").at("oracle") << "\n"
            << sample_report(got, e);
      }
    }
    EXPECT_EQ(seen.size(), linears.size()) << "expected.json lists linears qeval did not read";
    // Every block linear was read as the library stored it: dequantised, none read plain.
    const json& q = reader->info().notes.at("quantization");
    std::int64_t dequantised = 0;
    for (const auto& [form, count] : q.at("dequantized_modules").items()) dequantised += count.get<std::int64_t>();
    EXPECT_EQ(dequantised, static_cast<std::int64_t>(linears.size())) << q.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Libraries, QuantizedFolderFixtures, ::testing::ValuesIn(kFolders),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace qeval
