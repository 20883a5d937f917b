// An importance matrix in kind ggml (issue 77 item 4; quant/ggml_importance.h): the spec's
// "imatrix" key, the type choices llama-quantize makes differently with one (llama-quant.cpp:
// Q4_0's first n_layer/8 ffn_down Q4_1; IQ4_NL's stay IQ4_NL), the GGUF names tensors are looked
// up by, and a layer quantised with its entry (the importance wrapper's bytes) or without one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "common/error.h"
#include "model/block.h"
#include "quant/formats/ggml/quants.h"
#include "quant/ggml_importance.h"
#include "quant/quantized_linear.h"
#include "quant/schemes/ggml_rules.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

// 8 layers of 256-wide rows (n_layer / 8 = 1: layer 0 is "the first eighth").
ModelConfig eight_layers() {
  ModelConfig c;
  c.vocab_size = 512, c.d_model = 256, c.d_ff = 256, c.n_layers = 8, c.n_heads = 8, c.n_kv_heads = 8;
  c.max_seq_len = 128, c.norm = NormKind::rmsnorm, c.position = PositionKind::rope, c.mlp = MlpKind::swiglu;
  return c;
}

std::string type_of(const std::string& preset, const std::string& imatrix, const std::string& name) {
  SchemeSpec spec = resolve_scheme(preset);
  spec.weights.ggml_imatrix = imatrix;
  const ModelConfig c = eight_layers();
  return ggml_type_label(GgmlTypePlan(spec, model_linear_names(c), c).choose(name, 256).type);
}

TEST(GgmlImportanceScheme, TypeChoicesThatDependOnAnImatrix) {
  EXPECT_EQ(type_of("gguf-q4_0", "", "layers.0.mlp.down"), "Q4_0");
  EXPECT_EQ(type_of("gguf-q4_0", "m.gguf", "layers.0.mlp.down"), "Q4_1");
  EXPECT_EQ(type_of("gguf-q4_0", "m.gguf", "layers.1.mlp.down"), "Q4_0");
  EXPECT_EQ(type_of("gguf-q4_0", "m.gguf", "layers.0.attn.v"), "Q4_0");
  EXPECT_EQ(type_of("gguf-iq4_nl", "", "layers.0.mlp.down"), "Q5_K");
  EXPECT_EQ(type_of("gguf-iq4_nl", "m.gguf", "layers.0.mlp.down"), "IQ4_NL");
  // The others do not change.
  for (const char* preset : {"gguf-q4_k_m", "gguf-q4_k_s", "gguf-q5_k_m", "gguf-q6_k", "gguf-q8_0"})
    for (const char* name : {"layers.0.mlp.down", "layers.0.attn.v", "layers.3.mlp.down"})
      EXPECT_EQ(type_of(preset, "", name), type_of(preset, "m.gguf", name)) << preset << " " << name;
}

TEST(GgmlImportanceScheme, SpecKeyRoundTripsAndIsRefusedEmpty) {
  const SchemeSpec s = scheme_from_json(
      nlohmann::json::parse(R"({"weights": {"kind": "ggml", "file_type": "q4_k_m", "imatrix": "a/b.gguf"}})"), "t");
  EXPECT_EQ(s.weights.ggml_imatrix, "a/b.gguf");
  EXPECT_EQ(scheme_to_json(s).at("weights").at("imatrix"), "a/b.gguf");
  EXPECT_TRUE(scheme_from_json(scheme_to_json(s), "t").weights == s.weights);
  EXPECT_FALSE(scheme_to_json(resolve_scheme("gguf-q4_k_m")).at("weights").contains("imatrix"));
  EXPECT_TRUE(test::throws_with(
      [] {
        scheme_from_json(nlohmann::json::parse(R"({"weights": {"kind": "ggml", "type": "q4_k", "imatrix": ""}})"), "t");
      },
      {"imatrix is empty"}));
}

TEST(GgmlImportanceScheme, RelativeImatrixIsTheSchemeFilesNeighbour) {
  test::TempDir dir;
  test::write_bytes(dir / "s.json", R"({"weights": {"kind": "ggml", "type": "q4_k", "imatrix": "m.imatrix.gguf"}})");
  EXPECT_EQ(resolve_scheme((dir / "s.json").string()).weights.ggml_imatrix, (dir / "m.imatrix.gguf").string());
}

TEST(GgmlImportanceScheme, GgufNamesOfQevalTensors) {
  EXPECT_EQ(gguf_tensor_of("layers.3.attn.q", false).name, "blk.3.attn_q.weight");
  EXPECT_EQ(gguf_tensor_of("layers.3.attn.o", false).name, "blk.3.attn_output.weight");
  EXPECT_EQ(gguf_tensor_of("layers.12.mlp.down", false).name, "blk.12.ffn_down.weight");
  EXPECT_EQ(gguf_tensor_of("layers.0.mlp.gate", false).name, "blk.0.ffn_gate.weight");
  EXPECT_EQ(gguf_tensor_of("lm_head", false).name, "output.weight");
  EXPECT_EQ(gguf_tensor_of("lm_head", true).name, "token_embd.weight");
  EXPECT_EQ(gguf_tensor_of("token_embedding", false).name, "token_embd.weight");
  const GgufTensorRef e = gguf_tensor_of("layers.2.moe.experts.5.down", false);
  EXPECT_EQ(e.name, "blk.2.ffn_down_exps.weight");
  EXPECT_EQ(e.expert, 5);
  EXPECT_EQ(gguf_tensor_of("layers.2.moe.shared.up", false).name, "blk.2.ffn_up_shexp.weight");
  EXPECT_EQ(gguf_tensor_of("layers.2.attn.q", false).expert, -1);
}

TEST(GgmlImportanceScheme, LayerIsQuantisedWithItsEntryOrWithout) {
  at::manual_seed(77);
  const at::Tensor w = at::randn({16, 256}), b = at::Tensor();
  const at::Tensor q = at::rand({256}) * 4 + 0.01;
  auto importance = std::make_shared<GgmlImportanceWeights>();
  importance->by_name["layers.0.attn.q"] = q;
  for (const char* type : {"Q4_K", "Q6_K", "IQ4_NL", "Q4_0", "Q2_K", "Q8_0", "MXFP4"}) {
    SchemeSpec spec = scheme_from_json(
        nlohmann::json::parse(fmt::format(R"({{"weights": {{"kind": "ggml", "type": "{}", "imatrix": "m"}}}})", type)), "t");
    spec.ggml_importance = importance;
    const GgmlType t = ggml_type_from_json_name(type, "t", false);
    QuantizedLinear with("layers.0.attn.q", w, b, spec, ExecutionPath::reference);
    EXPECT_TRUE(at::equal(with.dequantized_weight(), quantize_dequantize_ggml(w, t, q))) << type;
    if (ggml_type_uses_importance(t))
      EXPECT_FALSE(at::equal(with.dequantized_weight(), quantize_dequantize_ggml(w, t))) << type;
    else
      EXPECT_TRUE(at::equal(with.dequantized_weight(), quantize_dequantize_ggml(w, t))) << type;
    // A tensor the file lacks is quantised without, as llama-quantize does.
    QuantizedLinear without("layers.0.attn.k", w, b, spec, ExecutionPath::reference);
    EXPECT_TRUE(at::equal(without.dequantized_weight(), quantize_dequantize_ggml(w, t))) << type;
    // The spec names a file nobody read: refused, never silently without.
    spec.ggml_importance = nullptr;
    EXPECT_TRUE(test::throws_with([&] { QuantizedLinear("layers.0.attn.q", w, b, spec, ExecutionPath::reference); },
                                  {"layers.0.attn.q", "importance matrix m", "not read"}));
  }
}

}  // namespace
}  // namespace qeval
