// Small random models and stand-in tokenizers/readers for evaluation tests.
#pragma once

#include <ATen/ATen.h>

#include <deque>
#include <string>
#include <vector>

#include "loaders/text/documents.h"
#include "loaders/tokenizers/tokenizer.h"
#include "model/transformer.h"

namespace qeval::test {

// A random model of the given shape (deterministic for a seed). Llama-style switches unless
// `gpt2` is set.
// kv_heads: the Llama model's key/value heads (of 4; 0: 2, grouped-query attention).
inline Transformer random_transformer(std::uint64_t seed, bool gpt2 = false, std::int64_t vocab = 64,
                                      std::int64_t d = 32, std::int64_t layers = 2, std::int64_t kv_heads = 0) {
  at::manual_seed(seed);
  ModelConfig c;
  c.vocab_size = vocab;
  c.d_model = d;
  c.d_ff = 3 * d;
  c.n_layers = layers;
  c.n_heads = 4;
  c.n_kv_heads = gpt2 ? 4 : (kv_heads > 0 ? kv_heads : 2);
  c.max_seq_len = 128;
  c.norm = gpt2 ? NormKind::layernorm : NormKind::rmsnorm;
  c.position = gpt2 ? PositionKind::learned : PositionKind::rope;
  c.mlp = gpt2 ? MlpKind::gelu : MlpKind::swiglu;
  c.attention_bias = c.mlp_bias = gpt2;
  c.fused_qkv = gpt2;
  c.tied_embeddings = gpt2;
  const std::int64_t hd = d / c.n_heads;
  auto lin = [&](std::int64_t out, std::int64_t in, bool bias) {
    return LinearWeights{at::randn({out, in}) / std::sqrt(static_cast<double>(in)), bias ? at::randn({out}) * 0.1 : at::Tensor()};
  };
  auto norm = [&] {
    return NormWeights{1 + 0.1 * at::randn({d}), gpt2 ? 0.1 * at::randn({d}) : at::Tensor()};
  };
  ModelWeights w;
  w.token_embedding = at::randn({vocab, d});
  if (gpt2) w.position_embedding = 0.1 * at::randn({c.max_seq_len, d});
  for (std::int64_t i = 0; i < layers; ++i) {
    BlockWeights b;
    b.attn_norm = norm();
    if (gpt2) {
      b.qkv = lin(3 * d, d, true);
    } else {
      b.q = lin(c.n_heads * hd, d, false);
      b.k = lin(c.n_kv_heads * hd, d, false);
      b.v = lin(c.n_kv_heads * hd, d, false);
    }
    b.o = lin(d, d, gpt2);
    b.mlp_norm = norm();
    b.up = lin(c.d_ff, d, gpt2);
    if (!gpt2) b.gate = lin(c.d_ff, d, false);
    b.down = lin(d, c.d_ff, gpt2);
    w.blocks.push_back(b);
  }
  w.final_norm = norm();
  w.lm_head = gpt2 ? w.token_embedding : at::randn({vocab, d}) / std::sqrt(static_cast<double>(d));
  return Transformer(c, w, "random test model");
}

// Bytes → ids (byte % vocab), with BOS 1 and separator 2: enough to drive protocols.
class ByteTokenizer : public Tokenizer {
 public:
  explicit ByteTokenizer(std::int64_t vocab = 64) : vocab_(vocab) {}
  std::vector<std::int32_t> encode(std::string_view text) const override {
    std::vector<std::int32_t> ids;
    for (unsigned char c : text) ids.push_back(static_cast<std::int32_t>(3 + c % (vocab_ - 3)));
    return ids;
  }
  std::string decode(const std::vector<std::int32_t>&) const override { return {}; }
  std::int64_t vocab_size() const override { return vocab_; }
  std::optional<std::int32_t> bos_id() const override { return 1; }
  std::optional<std::int32_t> eos_id() const override { return 2; }
  std::optional<std::int32_t> document_separator() const override { return 2; }
  std::string kind() const override { return "bytes"; }

 private:
  std::int64_t vocab_;
};

class ListDocuments : public DocumentReader {
 public:
  explicit ListDocuments(std::vector<std::string> docs) : docs_(docs.begin(), docs.end()) {}
  std::optional<std::string> next() override {
    if (docs_.empty()) return std::nullopt;
    std::string d = docs_.front();
    docs_.pop_front();
    return d;
  }
  std::string format() const override { return "list"; }

 private:
  std::deque<std::string> docs_;
};

}  // namespace qeval::test
