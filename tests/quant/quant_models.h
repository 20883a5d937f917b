// The models and token batches the whole-model quantisation tests share: stories260K on
// TinyStories text (BOS first, as evaluation windows start; random tokens would make it far more
// fragile than evaluation is), the two Hugging Face fixtures (GPT-2 with fused c_attn and biases;
// Llama with grouped-query attention) and random GPT-2- and Llama-style models; and per-token NLL
// computed from the logits with at::log_softmax, independent of eval/.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/tokenizers/tokenizer.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval::test {

// NLL of token t+1 given tokens ≤ t: [B, L−1] float64.
inline at::Tensor per_token_nll(const Transformer& model, const at::Tensor& tokens) {
  at::Tensor logp = at::log_softmax(model.forward(tokens), -1);  // [B, L, V]
  at::Tensor next = tokens.narrow(1, 1, tokens.size(1) - 1).unsqueeze(-1);
  return -logp.narrow(1, 0, tokens.size(1) - 1).gather(-1, next).squeeze(-1).to(at::kDouble);
}

inline Transformer load_data_model(const std::string& relative) {
  LoadedCheckpoint c = load_checkpoint(data_path(relative));
  return Transformer(c.config, c.weights, relative);
}

// `batch` windows of `L` tokens of TinyStories text for stories260K, BOS first.
inline at::Tensor stories_tokens(std::int64_t batch, std::int64_t L) {
  auto tok = load_tokenizer(data_path("models/stories260K/tok512.bin"));
  const std::vector<std::int32_t> ids =
      tok->encode(read_file(data_path("text/tinystories/validation-head.txt")).substr(0, 8 * static_cast<std::size_t>(batch * L)));
  at::Tensor t = at::empty({batch, L}, at::kLong);
  for (std::int64_t b = 0; b < batch; ++b) {
    t[b][0] = 1;
    for (std::int64_t l = 1; l < L; ++l) t[b][l] = ids.at(static_cast<std::size_t>(b * (L - 1) + l));
  }
  return t;
}

struct NamedModel {
  std::string name;
  Transformer model;
  at::Tensor tokens;  // [batch, L] int64
};

// The five models with `batch` windows each (random tokens drawn after at::manual_seed(seed));
// stories260K's windows are `stories_length` long.
inline std::vector<NamedModel> quant_test_models(std::uint64_t seed, std::int64_t batch, std::int64_t stories_length) {
  at::manual_seed(seed);
  std::vector<NamedModel> out;
  out.push_back({"stories260K", load_data_model("models/stories260K/stories260K.bin"), stories_tokens(batch, stories_length)});
  Transformer gpt2 = load_data_model("fixtures/tiny-gpt2-hf");
  out.push_back({"tiny-gpt2-hf", gpt2, at::randint(0, gpt2.config().vocab_size, {batch, 24}, at::kLong)});
  Transformer llama = load_data_model("fixtures/tiny-llama-hf");
  out.push_back({"tiny-llama-hf", llama, at::randint(0, llama.config().vocab_size, {batch, 24}, at::kLong)});
  out.push_back({"random-gpt2", random_transformer(3, true, 96, 64, 2), at::randint(0, 96, {batch, 40}, at::kLong)});
  out.push_back({"random-llama", random_transformer(4, false, 96, 64, 2), at::randint(0, 96, {batch, 40}, at::kLong)});
  return out;
}

}  // namespace qeval::test
