// stories260K (Karpathy's llama2.c model) from its two files: the llama2.c .bin and the GGUF
// (bit-identical tensors) must give identical logits, and greedy generation from BOS must
// reproduce the sample printed in llama2.c's doc/stories260K.md byte for byte.
#include <gtest/gtest.h>

#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/tokenizers/tokenizer.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

constexpr std::int32_t kBos = 1;

Transformer load_model(const std::string& relative) {
  const auto path = test::data_path("models/stories260K/" + relative);
  LoadedCheckpoint ckpt = load_checkpoint(path);
  return Transformer(ckpt.config, ckpt.weights, path.string());
}

// run.c's generate() with temperature 0: start from BOS, re-run the whole prefix each step
// (the model is tiny), take the argmax, stop after `steps` tokens or when BOS comes back.
std::vector<std::int32_t> greedy(const Transformer& model, int steps) {
  std::vector<std::int64_t> ids{kBos};
  std::vector<std::int32_t> generated;
  for (int step = 0; step < steps; ++step) {
    at::Tensor tokens = at::tensor(ids, at::kLong).unsqueeze(0);      // [1, L]
    at::Tensor logits = model.forward(tokens).select(1, tokens.size(1) - 1);  // [1, V]
    const auto next = static_cast<std::int32_t>(logits.argmax(-1).item<std::int64_t>());
    if (next == kBos) break;
    generated.push_back(next);
    ids.push_back(next);
  }
  return generated;
}

TEST(Stories260K, BinAndGgufHoldTheSameModel) {
  LoadedCheckpoint bin = load_checkpoint(test::data_path("models/stories260K/stories260K.bin"));
  LoadedCheckpoint gguf = load_checkpoint(test::data_path("models/stories260K/stories260K-tok512-f32.gguf"));
  EXPECT_EQ(bin.format, "llama2c");
  EXPECT_EQ(gguf.format, "gguf");
  // The README's header: dim 64, hidden 172, layers 5, heads 8, kv_heads 4, vocab 512, seq_len 512.
  for (const auto* c : {&bin.config, &gguf.config}) {
    EXPECT_EQ(c->d_model, 64);
    EXPECT_EQ(c->d_ff, 172);
    EXPECT_EQ(c->n_layers, 5);
    EXPECT_EQ(c->n_heads, 8);
    EXPECT_EQ(c->n_kv_heads, 4);
    EXPECT_EQ(c->vocab_size, 512);
    EXPECT_EQ(c->rope_pairing, RopePairing::interleaved);
    EXPECT_EQ(c->norm_eps, 1e-5);
    EXPECT_EQ(c->bos_id, 1);
    EXPECT_EQ(c->eos_id, 2);
  }
  EXPECT_EQ(bin.config.max_seq_len, 512);
  EXPECT_EQ(gguf.config.max_seq_len, 128);  // the GGUF's llama.context_length: information only
  EXPECT_EQ(gguf.notes.at("context_length"), 128);
  // The README counts 260,032 parameters (classifier shared with the embedding).
  std::int64_t parameters = bin.weights.token_embedding.numel() + bin.weights.final_norm.weight.numel();
  for (const auto& b : bin.weights.blocks)
    for (const auto* t : {&b.attn_norm.weight, &b.q.weight, &b.k.weight, &b.v.weight, &b.o.weight, &b.mlp_norm.weight,
                          &b.gate.weight, &b.up.weight, &b.down.weight})
      parameters += t->numel();
  EXPECT_EQ(parameters, 260'032);
  EXPECT_TRUE(bin.config.tied_embeddings);
  EXPECT_TRUE(bin.weights.lm_head.is_same(bin.weights.token_embedding));
  EXPECT_TRUE(test::tensors_equal(gguf.weights.token_embedding, bin.weights.token_embedding));
  EXPECT_TRUE(test::tensors_equal(gguf.weights.lm_head, bin.weights.lm_head));
  EXPECT_TRUE(test::tensors_equal(gguf.weights.final_norm.weight, bin.weights.final_norm.weight));
  for (std::size_t i = 0; i < bin.weights.blocks.size(); ++i) {
    SCOPED_TRACE("block " + std::to_string(i));
    const auto &a = bin.weights.blocks[i], &b = gguf.weights.blocks[i];
    for (auto [x, y] : {std::pair{&a.q.weight, &b.q.weight}, {&a.k.weight, &b.k.weight}, {&a.v.weight, &b.v.weight},
                        {&a.o.weight, &b.o.weight}, {&a.gate.weight, &b.gate.weight}, {&a.up.weight, &b.up.weight},
                        {&a.down.weight, &b.down.weight}, {&a.attn_norm.weight, &b.attn_norm.weight},
                        {&a.mlp_norm.weight, &b.mlp_norm.weight}})
      EXPECT_TRUE(test::tensors_equal(*y, *x));
  }
}

TEST(Stories260K, BinAndGgufGiveIdenticalLogitsBeyondTheGgufContextLength) {
  Transformer bin = load_model("stories260K.bin");
  Transformer gguf = load_model("stories260K-tok512-f32.gguf");
  // 300 positions: past the GGUF's context_length (128), which must not limit a rope model.
  std::vector<std::int64_t> ids{kBos};
  for (std::int64_t i = 1; i < 300; ++i) ids.push_back(3 + (i * 37 + 11) % 509);
  at::Tensor tokens = at::tensor(ids, at::kLong).reshape({2, 150});
  at::Tensor a = bin.forward(tokens), b = gguf.forward(tokens);
  EXPECT_EQ(a.sizes(), (std::vector<std::int64_t>{2, 150, 512}));
  EXPECT_TRUE(test::tensors_equal(b, a));
  at::Tensor long_window = at::tensor(ids, at::kLong).unsqueeze(0);
  EXPECT_TRUE(test::tensors_equal(gguf.forward(long_window), bin.forward(long_window)));
}

TEST(Stories260K, GreedyGenerationMatchesLlama2cSampleFromBothFormats) {
  const auto dir = test::data_path("models/stories260K");
  std::string expected = read_file(dir / "expected_greedy_256steps.txt");
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(expected.back(), '\n');  // the file's own final newline, not generated
  expected.pop_back();
  auto tokenizer = load_tokenizer(dir / "tok512.bin");
  for (const char* file : {"stories260K.bin", "stories260K-tok512-f32.gguf"}) {
    SCOPED_TRACE(file);
    std::vector<std::int32_t> generated = greedy(load_model(file), 256);
    EXPECT_EQ(generated.size(), 256u);
    // run.c decodes each piece with the previous token: after BOS the leading space goes.
    std::vector<std::int32_t> with_bos{kBos};
    with_bos.insert(with_bos.end(), generated.begin(), generated.end());
    EXPECT_EQ(tokenizer->decode(with_bos), expected);
  }
}

}  // namespace
}  // namespace qeval
