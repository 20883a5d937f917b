// llama2.c v0 checkpoints: stories260K's header and tensor placement checked against the byte
// layout in shared/data/README.md (read here by hand), an untied variant, and truncated or
// padded files that must each raise qeval::Error naming the file and the size problem.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/model_reader.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

fs::path bin_path() { return test::data_path("models/stories260K/stories260K.bin"); }

// `count` floats of the file starting at float index `first` after the 28-byte header.
at::Tensor raw_floats(const std::string& bytes, std::int64_t first, std::int64_t count) {
  at::Tensor t = at::empty({count}, at::kFloat);
  std::memcpy(t.data_ptr(), bytes.data() + 28 + 4 * first, 4 * count);
  return t;
}

TEST(Llama2cCheckpoint, Stories260KTensorsSitWhereTheReadmeSays) {
  const std::string bytes = read_file(bin_path());
  LoadedCheckpoint ckpt = load_checkpoint(bin_path());
  EXPECT_EQ(ckpt.format, "llama2c");
  EXPECT_EQ(ckpt.weights_hash.size(), 16u);  // its definition: weights_hash_test.cpp
  EXPECT_EQ(open_checkpoint(bin_path())->legacy_weights_hash(), hash_file(bin_path()));  // the one before
  EXPECT_EQ(ckpt.config.norm, NormKind::rmsnorm);
  EXPECT_EQ(ckpt.config.position, PositionKind::rope);
  EXPECT_EQ(ckpt.config.mlp, MlpKind::swiglu);
  EXPECT_EQ(ckpt.notes.at("header").at("seq_len"), 512);
  EXPECT_NE(ckpt.notes.at("freq_cis").get<std::string>().find("ignored"), std::string::npos);
  // README order: tok_emb[512×64], rms_att[5×64], wq[5×64×64], wk[5×32×64], wv[5×32×64],
  // wo[5×64×64], rms_ffn[5×64], w1[5×172×64], w2[5×64×172], w3[5×172×64], rms_final[64].
  const std::int64_t tok = 0, rms_att = tok + 512 * 64, wq = rms_att + 5 * 64, wk = wq + 5 * 64 * 64,
                     wv = wk + 5 * 32 * 64, wo = wv + 5 * 32 * 64, rms_ffn = wo + 5 * 64 * 64, w1 = rms_ffn + 5 * 64,
                     w2 = w1 + 5 * 172 * 64, w3 = w2 + 5 * 64 * 172, rms_final = w3 + 5 * 172 * 64;
  const auto& w = ckpt.weights;
  EXPECT_TRUE(test::tensors_equal(w.token_embedding.reshape({-1}), raw_floats(bytes, tok, 512 * 64)));
  EXPECT_TRUE(test::tensors_equal(w.blocks[3].attn_norm.weight, raw_floats(bytes, rms_att + 3 * 64, 64)));
  EXPECT_TRUE(test::tensors_equal(w.blocks[2].q.weight.reshape({-1}), raw_floats(bytes, wq + 2 * 4096, 4096)));
  EXPECT_TRUE(test::tensors_equal(w.blocks[4].k.weight.reshape({-1}), raw_floats(bytes, wk + 4 * 2048, 2048)));
  EXPECT_TRUE(test::tensors_equal(w.blocks[0].v.weight.reshape({-1}), raw_floats(bytes, wv, 2048)));
  EXPECT_TRUE(test::tensors_equal(w.blocks[1].o.weight.reshape({-1}), raw_floats(bytes, wo + 4096, 4096)));
  EXPECT_TRUE(test::tensors_equal(w.blocks[1].mlp_norm.weight, raw_floats(bytes, rms_ffn + 64, 64)));
  EXPECT_TRUE(test::tensors_equal(w.blocks[1].gate.weight.reshape({-1}), raw_floats(bytes, w1 + 11008, 11008)));
  EXPECT_TRUE(test::tensors_equal(w.blocks[1].down.weight.reshape({-1}), raw_floats(bytes, w2 + 11008, 11008)));
  EXPECT_TRUE(test::tensors_equal(w.blocks[1].up.weight.reshape({-1}), raw_floats(bytes, w3 + 11008, 11008)));
  EXPECT_TRUE(test::tensors_equal(w.final_norm.weight, raw_floats(bytes, rms_final, 64)));
  EXPECT_EQ(w.blocks[1].down.weight.sizes(), (std::vector<std::int64_t>{64, 172}));
  // Then the two freq_cis tables of 512×4 floats end the file.
  EXPECT_EQ(static_cast<std::int64_t>(bytes.size()), 28 + 4 * (rms_final + 64 + 2 * 512 * 4));
}

TEST(Llama2cCheckpoint, NegativeVocabSizeMeansAnUntiedClassifierFollows) {
  std::string bytes = read_file(bin_path());
  std::int32_t vocab = -512;
  std::memcpy(bytes.data() + 20, &vocab, 4);
  at::Tensor wcls = at::arange(512 * 64, at::kFloat).reshape({512, 64}) / 1000;
  bytes.append(static_cast<const char*>(wcls.data_ptr()), 512 * 64 * 4);
  test::TempDir tmp;
  test::write_bytes(tmp / "untied.bin", bytes);
  LoadedCheckpoint ckpt = load_checkpoint(tmp / "untied.bin");
  EXPECT_FALSE(ckpt.config.tied_embeddings);
  EXPECT_EQ(ckpt.config.vocab_size, 512);
  EXPECT_TRUE(test::tensors_equal(ckpt.weights.lm_head, wcls));
}

TEST(Llama2cCheckpointBadInput, TruncatedOrPaddedFiles) {
  const std::string bytes = read_file(bin_path());
  test::TempDir tmp;
  test::write_bytes(tmp / "short.bin", bytes.substr(0, bytes.size() - 4));
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "short.bin"); },
                          {"short.bin", "implies 1056540 bytes", "1056536", "missing 4 bytes", "truncated"}));
  test::write_bytes(tmp / "long.bin", bytes + std::string(8, '\0'));
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "long.bin"); }, {"long.bin", "implies 1056540 bytes", "extra 8 bytes"}));
  test::write_bytes(tmp / "header.bin", bytes.substr(0, 10));
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "header.bin"); }, {"header.bin", "truncated", "28-byte header"}));
  test::write_bytes(tmp / "zeros.bin", std::string(1000, '\0'));
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "zeros.bin"); }, {"zeros.bin", "header field dim is 0", "not a llama2.c checkpoint?"}));
  std::string odd = bytes;
  std::int32_t heads = 7;  // 64 is not a multiple of 7
  std::memcpy(odd.data() + 12, &heads, 4);
  test::write_bytes(tmp / "odd.bin", odd);
  EXPECT_TRUE(test::throws_with([&] { load_checkpoint(tmp / "odd.bin"); }, {"odd.bin", "header field n_heads 7 is not a multiple of header field n_kv_heads 4"}));
}

}  // namespace
}  // namespace qeval
