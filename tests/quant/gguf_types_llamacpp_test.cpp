// The gguf-* presets against llama.cpp itself (issue 64, docs/gguf-types.md): two F32 GGUFs
// (stories260K: 64-wide rows and a 172-wide ffn_down, separate output; tiny256: every row a
// multiple of 256, 8 layers, GQA ratio 4, tied embedding; tests/oracle/make_gguf_type_models.py)
// are quantised by llama.cpp's llama_model_quantize for each file type
// (tests/oracle/llamacpp_quantize.py); then every tensor's type in llama.cpp's file equals the
// preset's choice, and evaluating llama.cpp's file with `full` (qeval's GGUF reader dequantises
// it) gives the NLL of the F32 file under the preset, window by window.
//
// Needs python3 with gguf and numpy, and $QEVAL_LLAMACPP_PYTHON (default python3) with
// llama_cpp (llama-cpp-python 0.3.36); skipped, saying which is missing, otherwise.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "loaders/checkpoints/gguf.h"
#include "loaders/checkpoints/model_reader.h"
#include "tests/support/plan_runs.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

bool python_imports(const std::string& python, const std::string& modules) {
  return std::system((quoted(python) + " -c 'import " + modules + "' >/dev/null 2>&1").c_str()) == 0;
}

std::string llamacpp_python() {
  const char* env = std::getenv("QEVAL_LLAMACPP_PYTHON");
  return env != nullptr && *env != '\0' ? env : "python3";
}

// "blk.3.attn_v.weight" -> "layers.3.attn.v"; "" for tensors that are not weights qeval quantises.
std::string qeval_name(const std::string& gguf) {
  if (gguf == "token_embd.weight") return "token_embedding";
  if (gguf == "output.weight") return "lm_head";
  static const std::map<std::string, std::string> kinds = {
      {"attn_q", "attn.q"},   {"attn_k", "attn.k"},     {"attn_v", "attn.v"}, {"attn_output", "attn.o"},
      {"ffn_gate", "mlp.gate"}, {"ffn_up", "mlp.up"}, {"ffn_down", "mlp.down"}};
  if (gguf.rfind("blk.", 0) != 0) return "";
  const std::size_t dot = gguf.find('.', 4);
  const std::string layer = gguf.substr(4, dot - 4);
  const std::string kind = gguf.substr(dot + 1, gguf.rfind(".weight") - dot - 1);
  auto it = kinds.find(kind);
  return it == kinds.end() ? "" : "layers." + layer + "." + it->second;
}

TEST(GgufTypesLlamaCpp, PresetsMatchLlamaQuantizeTypesAndNll) {
  if (!python_imports("python3", "gguf, numpy")) GTEST_SKIP() << "needs python3 with the packages gguf and numpy";
  if (!python_imports(llamacpp_python(), "llama_cpp"))
    GTEST_SKIP() << llamacpp_python() << " cannot import llama_cpp: set $QEVAL_LLAMACPP_PYTHON to a python with "
                 << "llama-cpp-python 0.3.36 to compare against llama.cpp's own llama_model_quantize";
  test::TempDir dir;
  const std::string make = "python3 " + quoted(test::repo_path("tests/oracle/make_gguf_type_models.py").string()) + " " +
                           quoted(test::data_path("models/stories260K/stories260K-tok512-f32.gguf").string()) + " " +
                           quoted(dir.path().string());
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  const std::vector<std::pair<std::string, std::string>> presets = {
      {"gguf-q8_0", "Q8_0"},     {"gguf-q6_k", "Q6_K"}, {"gguf-q5_k_m", "Q5_K_M"}, {"gguf-q4_k_m", "Q4_K_M"},
      {"gguf-q4_k_s", "Q4_K_S"}, {"gguf-q4_0", "Q4_0"}, {"gguf-iq4_nl", "IQ4_NL"}, {"gguf-mxfp4-moe", "MXFP4_MOE"}};
  std::printf("%-12s %-15s %-18s %-18s %s\n", "model", "preset", "NLL llama.cpp full", "NLL F32 + preset", "types");
  for (const std::string model : {"stories260K", "tiny256"}) {
    const fs::path f32 = dir / (model + "-f32.gguf");
    auto f32_reader = open_checkpoint(f32);
    test::PlanRunSetup setup;
    setup.documents = 3;  // 3 windows of 24 tokens
    setup.schemes = {"full"};
    for (const auto& [preset, ftype] : presets) setup.schemes.push_back(preset);
    const test::PlanRun ours = test::evaluate_over_plan(*f32_reader, test::plan_of("resident", 0), 2, setup);
    for (std::size_t p = 0; p < presets.size(); ++p) {
      const auto& [preset, ftype] = presets[p];
      const fs::path quantised = dir / (model + "-" + ftype + ".gguf");
      const std::string cmd = quoted(llamacpp_python()) + " " +
                              quoted(test::repo_path("tests/oracle/llamacpp_quantize.py").string()) + " " +
                              quoted(f32.string()) + " " + quoted(quantised.string()) + " " + ftype + " >/dev/null 2>&1";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      // Every tensor's type.
      std::map<std::string, std::string> chosen;
      for (const auto& layer : ours.prepared.schemes[p + 1].description.at("layers"))
        chosen[layer.at("name")] = layer.at("ggml_type");
      const GgufFile file(quantised);
      std::map<std::string, int> counts;
      std::size_t compared = 0;
      for (const GgufTensorInfo& t : file.tensors()) {
        const std::string name = qeval_name(t.name);
        if (name.empty()) continue;
        ++compared;
        ++counts[ggml_type_name(t.type)];
        ASSERT_TRUE(chosen.count(name)) << model << " " << preset << ": qeval's record has no " << name;
        EXPECT_EQ(chosen.at(name), ggml_type_name(t.type)) << model << " " << preset << " " << t.name;
      }
      if (!file.has_tensor("output.weight")) {  // tied: one table, the head is the embedding
        EXPECT_EQ(chosen.at("lm_head"), chosen.at("token_embedding")) << model << " " << preset;
        ++compared;
      }
      EXPECT_EQ(compared, chosen.size()) << model << " " << preset << ": tensors compared";
      // NLL, window by window.
      auto q_reader = open_checkpoint(quantised);
      test::PlanRunSetup full_only;
      full_only.documents = setup.documents;
      const test::PlanRun theirs = test::evaluate_over_plan(*q_reader, test::plan_of("resident", 0), 2, full_only);
      double nll_ours = 0, nll_theirs = 0, worst = 0;
      for (const auto& [w, row] : theirs.result.schemes[0].rows) {
        const double a = ours.result.schemes[p + 1].rows.at(w).nll_sum;
        nll_ours += a, nll_theirs += row.nll_sum;
        worst = std::max(worst, std::abs(a - row.nll_sum) / std::abs(row.nll_sum));
      }
      EXPECT_LE(worst, 1e-6) << model << " " << preset;
      std::string types;
      for (const auto& [type, n] : counts) types += type + "×" + std::to_string(n) + " ";
      std::printf("%-12s %-15s %-18.10f %-18.10f %s(max rel. diff per window %.1e)\n", model.c_str(), preset.c_str(),
                  nll_theirs, nll_ours, types.c_str(), worst);
    }
  }
}

}  // namespace
}  // namespace qeval
