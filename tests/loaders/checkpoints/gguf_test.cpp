// GGUF: the stories260K file parsed (metadata, tensor infos, dims fastest-first), an F16
// GGUF written here from the llama2.c weights, and corrupt files (magic, version, truncation
// at every stage, quantised tensor types) that must each raise qeval::Error naming the file.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/gguf.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

fs::path gguf_path() { return test::data_path("models/stories260K/stories260K-tok512-f32.gguf"); }

// A minimal GGUF writer following the format description (not qeval's reader).
class GgufBuilder {
 public:
  template <typename T>
  static std::string pod(T v) {
    std::string s(sizeof(T), '\0');
    std::memcpy(s.data(), &v, sizeof(T));
    return s;
  }
  static std::string str(const std::string& s) { return pod<std::uint64_t>(s.size()) + s; }

  void u32(const std::string& key, std::uint32_t v) { kv(key, 4, pod(v)); }
  void f32(const std::string& key, float v) { kv(key, 6, pod(v)); }
  void string(const std::string& key, const std::string& v) { kv(key, 8, str(v)); }
  // `t`: row-major [out, in] or [n]; stored with ne reversed, as F32 (type 0) or F16 (type 1).
  void tensor(const std::string& name, const at::Tensor& t, std::uint32_t type) {
    at::Tensor data = (type == 1 ? t.to(at::kHalf) : t.to(at::kFloat)).contiguous();
    std::string info = str(name) + pod<std::uint32_t>(static_cast<std::uint32_t>(t.dim()));
    for (std::int64_t d = t.dim() - 1; d >= 0; --d) info += pod<std::uint64_t>(static_cast<std::uint64_t>(t.size(d)));
    info += pod<std::uint32_t>(type) + pod<std::uint64_t>(data_.size());
    infos_ += info;
    data_.append(static_cast<const char*>(data.data_ptr()), data.numel() * data.element_size());
    data_.append((alignment_ - data_.size() % alignment_) % alignment_, '\0');
    ++n_tensors_;
  }
  void alignment(std::uint32_t a) {
    alignment_ = a;
    u32("general.alignment", a);
  }
  std::string build() const {
    std::string out = "GGUF" + pod<std::uint32_t>(3) + pod<std::uint64_t>(n_tensors_) + pod<std::uint64_t>(n_kv_) + kvs_ + infos_;
    out.append((alignment_ - out.size() % alignment_) % alignment_, '\0');
    return out + data_;
  }

 private:
  void kv(const std::string& key, std::uint32_t type, const std::string& value) {
    kvs_ += str(key) + pod(type) + value;
    ++n_kv_;
  }
  std::string kvs_, infos_, data_;
  std::uint64_t n_kv_ = 0, n_tensors_ = 0, alignment_ = 32;
};

// stories260K's weights (from the .bin) as a GGUF of `type`, optionally without one tensor.
std::string stories_gguf(std::uint32_t type, const std::string& arch = "llama", const std::string& skip = "") {
  LoadedCheckpoint bin = load_checkpoint(test::data_path("models/stories260K/stories260K.bin"));
  GgufBuilder g;
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
    if (name != skip) g.tensor(name, t, type);
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

TEST(GgufBadInput, QuantisedTensorTypeIsRefusedByName) {
  std::string bytes = read_file(gguf_path());
  // The tensor info: name, u32 n_dims, u64 ne[2], then the u32 type.
  const std::string name = "token_embd.weight";
  const std::size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  const std::uint32_t q4_0 = 2;
  std::memcpy(bytes.data() + at + name.size() + 4 + 16, &q4_0, 4);
  test::TempDir tmp;
  test::write_bytes(tmp / "q4.gguf", bytes);
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "q4.gguf"); },
                          {"q4.gguf", "token_embd.weight", "unsupported type Q4_0", "F32, F16"}));
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
