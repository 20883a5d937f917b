// GGUF: the stories260K file parsed (metadata, tensor infos, dims fastest-first), F16 and Q8_0
// GGUFs written here from the llama2.c weights, and corrupt files (magic, version, truncation
// at every stage, tensor types qeval cannot read, rows that are not whole blocks) that must each
// raise qeval::Error naming the file. The block dequantisers themselves: gguf_dequantize_test.cpp.
#include <gtest/gtest.h>

#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/gguf.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

fs::path gguf_path() { return test::data_path("models/stories260K/stories260K-tok512-f32.gguf"); }

// Q8_0 as ggml's quantize_row_q8_0_ref: per 32 values d = amax / 127 (stored fp16),
// q = round(x / d). Also returns what the block decodes to, fp16(d) * q, as float32.
struct Q8_0Tensor {
  std::string bytes;
  at::Tensor decoded;
};
Q8_0Tensor quantize_q8_0(const at::Tensor& t) {
  const at::Tensor x = t.to(at::kFloat).contiguous().reshape({-1, 32});
  Q8_0Tensor out{"", at::empty_like(x)};
  for (std::int64_t b = 0; b < x.size(0); ++b) {
    const float* v = x[b].data_ptr<float>();
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127, id = d != 0 ? 1 / d : 0;
    const c10::Half dh(d);
    out.bytes += test::GgufBuilder::pod(dh.x);
    for (int j = 0; j < 32; ++j) {
      const auto q = static_cast<std::int8_t>(std::round(v[j] * id));
      out.bytes += static_cast<char>(q);
      out.decoded[b][j] = static_cast<float>(q) * static_cast<float>(dh);
    }
  }
  out.decoded = out.decoded.reshape(t.sizes());
  return out;
}

// stories260K's weights (from the .bin) as a GGUF of `type` (0 F32, 1 F16, 8 Q8_0: the tensors
// whose rows are whole 32-element blocks, the others F32), optionally without one tensor.
// `decoded` receives what each tensor should read back as.
std::string stories_gguf(std::uint32_t type, const std::string& arch = "llama", const std::string& skip = "",
                         std::map<std::string, at::Tensor>* decoded = nullptr) {
  LoadedCheckpoint bin = load_checkpoint(test::data_path("models/stories260K/stories260K.bin"));
  test::GgufBuilder g;
  g.string("general.architecture", arch);
  g.alignment(64);
  g.u32(arch + ".context_length", 512);
  g.u32(arch + ".embedding_length", 64);
  g.u32(arch + ".feed_forward_length", 172);
  g.u32(arch + ".block_count", 5);
  g.u32(arch + ".attention.head_count", 8);
  g.u32(arch + ".attention.head_count_kv", 4);
  g.f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  g.f32(arch + ".rope.freq_base", 20000.0f);
  const auto& w = bin.weights;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    if (name == skip) return;
    if (type == 8 && t.dim() == 2 && t.size(1) % 32 == 0) {
      Q8_0Tensor q = quantize_q8_0(t);
      g.raw_tensor(name, t.sizes().vec(), 8, q.bytes);
      if (decoded) (*decoded)[name] = q.decoded;
    } else {
      const std::uint32_t stored = type == 8 ? 0 : type;
      g.tensor(name, t, stored);
      if (decoded) (*decoded)[name] = stored == 1 ? t.to(at::kHalf).to(at::kFloat) : t;
    }
  };
  add("token_embd.weight", w.token_embedding);
  for (int i = 0; i < 5; ++i) {
    const auto& b = w.blocks[static_cast<std::size_t>(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", b.attn_norm.weight);
    add(p + "attn_q.weight", b.q.weight);
    add(p + "attn_k.weight", b.k.weight);
    add(p + "attn_v.weight", b.v.weight);
    add(p + "attn_output.weight", b.o.weight);
    add(p + "ffn_norm.weight", b.mlp_norm.weight);
    add(p + "ffn_gate.weight", b.gate.weight);
    add(p + "ffn_up.weight", b.up.weight);
    add(p + "ffn_down.weight", b.down.weight);
  }
  add("output_norm.weight", w.final_norm.weight);
  return g.build();
}

TEST(Gguf, ParsesStories260KHeader) {
  GgufFile f(gguf_path());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.tensors().size(), 48u);  // 5 × 9 + token_embd + output_norm + output
  EXPECT_EQ(f.metadata().at("general.architecture"), "llama");
  EXPECT_EQ(f.metadata().at("llama.context_length"), 128);
  EXPECT_EQ(f.value_type("llama.attention.layer_norm_rms_epsilon"), 6u);
  const auto& tokens = f.metadata().at("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  const auto& k = f.tensor("blk.0.attn_k.weight");  // [out 32, in 64] stored fastest-first
  EXPECT_EQ(k.ne, (std::vector<std::uint64_t>{64, 32}));
  EXPECT_EQ(k.shape(), (std::vector<std::int64_t>{32, 64}));
  EXPECT_EQ(ggml_type_name(k.type), "F32");
  EXPECT_EQ(f.data_offset() % 32, 0u);
}

TEST(Gguf, Stories260KConfigFromMetadata) {
  LoadedCheckpoint ckpt = load_checkpoint(gguf_path());
  EXPECT_EQ(ckpt.config.norm_eps, 1e-5);  // the float32 1e-5 read back as the decimal written
  EXPECT_EQ(ckpt.config.rope_theta, 10000.0);  // no rope.freq_base in the file
  EXPECT_FALSE(ckpt.config.tied_embeddings);   // this file carries output.weight
  EXPECT_EQ(ckpt.notes.at("tensor_types").at("F32"), 48);
  EXPECT_NE(ckpt.notes.at("positions").get<std::string>().find("not a limit"), std::string::npos);
}

TEST(Gguf, F16TensorsLoadAsFloat32AndOutputAbsentMeansTied) {
  test::TempDir tmp;
  test::write_bytes(tmp / "f16.gguf", stories_gguf(/*F16*/ 1));
  LoadedCheckpoint f16 = load_checkpoint(tmp / "f16.gguf");
  LoadedCheckpoint bin = load_checkpoint(test::data_path("models/stories260K/stories260K.bin"));
  EXPECT_EQ(f16.format, "gguf");
  EXPECT_EQ(f16.config.rope_theta, 20000.0);
  EXPECT_EQ(f16.config.max_seq_len, 512);
  EXPECT_TRUE(f16.config.tied_embeddings);
  EXPECT_TRUE(f16.weights.lm_head.is_same(f16.weights.token_embedding));
  EXPECT_EQ(f16.notes.at("alignment"), 64);
  auto as_half = [](const at::Tensor& t) { return t.to(at::kHalf).to(at::kFloat); };
  EXPECT_TRUE(test::tensors_equal(f16.weights.blocks[3].down.weight, as_half(bin.weights.blocks[3].down.weight)));
  EXPECT_TRUE(test::tensors_equal(f16.weights.blocks[4].k.weight, as_half(bin.weights.blocks[4].k.weight)));
  EXPECT_TRUE(test::tensors_equal(f16.weights.token_embedding, as_half(bin.weights.token_embedding)));
}

TEST(GgufBadInput, BadMagicAndVersion) {
  std::string bytes = read_file(gguf_path());
  test::TempDir tmp;
  std::string magic = bytes;
  magic[3] = 'X';
  test::write_bytes(tmp / "magic.gguf", magic);
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "magic.gguf"); }, {"magic.gguf", "bad magic", "GGUX", "\"GGUF\""}));
  for (std::uint32_t version : {1u, 4u, 0x03000000u}) {
    std::string v = bytes;
    std::memcpy(v.data() + 4, &version, 4);
    test::write_bytes(tmp / "version.gguf", v);
    EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "version.gguf"); },
                            {"version.gguf", "GGUF version " + std::to_string(version), "expected 3"}));
  }
}

TEST(GgufBadInput, TruncatedAtEveryStage) {
  const std::string bytes = read_file(gguf_path());
  test::TempDir tmp;
  // Inside the counts, inside the token list, inside the tensor infos, inside the data.
  for (std::size_t cut : {std::size_t{12}, std::size_t{3000}, std::size_t{13000}, bytes.size() - 100}) {
    SCOPED_TRACE(cut);
    test::write_bytes(tmp / "cut.gguf", bytes.substr(0, cut));
    EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "cut.gguf"); }, {"cut.gguf", "truncated"}));
  }
  // A string length far beyond the file must be refused before anything is allocated.
  std::string huge = bytes;
  const std::uint64_t length = 1ull << 60;
  std::memcpy(huge.data() + 24, &length, 8);  // the first metadata key's length
  test::write_bytes(tmp / "huge.gguf", huge);
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "huge.gguf"); }, {"huge.gguf", "truncated", "metadata key 0"}));
}

TEST(Gguf, Q8_0TensorsAreDequantisedAndTheNotesSaySo) {
  test::TempDir tmp;
  std::map<std::string, at::Tensor> decoded;
  test::write_bytes(tmp / "q8.gguf", stories_gguf(/*Q8_0*/ 8, "llama", "", &decoded));
  LoadedCheckpoint q8 = load_checkpoint(tmp / "q8.gguf");
  LoadedCheckpoint bin = load_checkpoint(test::data_path("models/stories260K/stories260K.bin"));
  // Every 2-D tensor with 64 columns is Q8_0 (token_embd, q, k, v, o, gate, up: 1 + 5 × 6);
  // ffn_down has 172 columns, not whole blocks, and stays F32 with the norms (5 × 3 + 1).
  EXPECT_EQ(q8.notes.at("dequantized_from"), (nlohmann::json{{"F32", 16}, {"Q8_0", 31}}));
  EXPECT_EQ(q8.notes.at("tensor_types"), q8.notes.at("dequantized_from"));
  EXPECT_NE(q8.notes.at("full_precision").get<std::string>().find("dequantised weights"), std::string::npos);
  EXPECT_TRUE(test::tensors_equal(q8.weights.token_embedding, decoded.at("token_embd.weight")));
  EXPECT_TRUE(test::tensors_equal(q8.weights.blocks[2].q.weight, decoded.at("blk.2.attn_q.weight")));
  EXPECT_TRUE(test::tensors_equal(q8.weights.blocks[4].up.weight, decoded.at("blk.4.ffn_up.weight")));
  EXPECT_TRUE(test::tensors_equal(q8.weights.blocks[1].down.weight, bin.weights.blocks[1].down.weight));
  // Half a step of d = amax / 127 at most (plus the fp16 rounding of d).
  EXPECT_TRUE(test::tensors_close(q8.weights.blocks[3].gate.weight, bin.weights.blocks[3].gate.weight, 0.01));
  // A model without quantised tensors says nothing of dequantisation.
  EXPECT_FALSE(load_checkpoint(gguf_path()).notes.contains("dequantized_from"));
}

// Rewrites the type of tensor `name` in a copy of the stories260K GGUF. The tensor info is:
// name, u32 n_dims, u64 ne[n_dims], then the u32 type.
std::string with_type(std::string bytes, const std::string& name, std::uint32_t type) {
  const std::size_t at = bytes.find(name);
  EXPECT_NE(at, std::string::npos);
  std::uint32_t n_dims = 0;
  std::memcpy(&n_dims, bytes.data() + at + name.size(), 4);
  std::memcpy(bytes.data() + at + name.size() + 4 + 8 * n_dims, &type, 4);
  return bytes;
}

TEST(GgufBadInput, UnsupportedTensorTypesAreRefusedByName) {
  const std::string bytes = read_file(gguf_path());
  test::TempDir tmp;
  // token_embd.weight is [512, 64]: 64 columns are whole blocks of 32 for these types, and none
  // needs more bytes than the F32 data it replaces.
  for (auto [type, name] : {std::pair{9u, "Q8_1"}, std::pair{26u, "I32"}, std::pair{24u, "I8"}}) {
    SCOPED_TRACE(name);
    test::write_bytes(tmp / "q.gguf", with_type(bytes, "token_embd.weight", type));
    EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "q.gguf"); },
                                  {"q.gguf", "tensor token_embd.weight", std::string("type ") + name,
                                   "cannot read", "F32, F16, BF16, Q4_0", "Q6_K"}));
  }
}

TEST(GgufBadInput, RowsThatAreNotWholeBlocksAreRefused) {
  const std::string bytes = read_file(gguf_path());
  test::TempDir tmp;
  // 64 columns: not a multiple of the K-quants' 256 (nor of IQ2_XXS's); a 1-D norm of 64 neither.
  for (auto [tensor, type, name] : {std::tuple{"token_embd.weight", 12u, "Q4_K"}, std::tuple{"blk.0.attn_q.weight", 14u, "Q6_K"},
                                    std::tuple{"output_norm.weight", 16u, "IQ2_XXS"}}) {
    SCOPED_TRACE(name);
    test::write_bytes(tmp / "rows.gguf", with_type(bytes, tensor, type));
    EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "rows.gguf"); },
                                  {"rows.gguf", std::string("tensor ") + tensor, std::string("type ") + name,
                                   "64 columns", "not a multiple of its block 256"}));
  }
}

TEST(GgufBadInput, QuantisedTensorBeyondTheDataAreaIsRefused) {
  // A Q8_0 tensor (its span n / 32 * 34 bytes) moved 1 MiB on, past the end of the file.
  std::string bytes = with_type(read_file(gguf_path()), "output.weight", 8);
  const std::string name = "output.weight";
  const std::size_t at = bytes.find(name);
  std::uint64_t offset = 0;
  std::memcpy(&offset, bytes.data() + at + name.size() + 4 + 16 + 4, 8);
  offset += 1u << 20;  // still aligned, now beyond the end
  std::memcpy(bytes.data() + at + name.size() + 4 + 16 + 4, &offset, 8);
  test::TempDir tmp;
  test::write_bytes(tmp / "span.gguf", bytes);
  EXPECT_TRUE(test::throws_with([&] { GgufFile f(tmp / "span.gguf"); }, {"span.gguf", "tensor output.weight", "spans"}));
}

TEST(GgufBadInput, WrongArchitectureOrMissingTensor) {
  test::TempDir tmp;
  test::write_bytes(tmp / "falcon.gguf", stories_gguf(0, "falcon"));
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "falcon.gguf"); }, {"falcon.gguf", "architecture \"falcon\"", "llama"}));
  test::write_bytes(tmp / "missing.gguf", stories_gguf(0, "llama", "blk.2.ffn_up.weight"));
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "missing.gguf"); }, {"missing.gguf", "missing tensor blk.2.ffn_up.weight"}));
}

}  // namespace
}  // namespace qeval
