// SmolLM2-135M-Instruct (Q4_1 GGUF, fetched by scripts/models): qeval's logits on a real
// 512-token window against an independent forward pass (tests/oracle/llama_gguf_forward.py:
// llama.cpp's `gguf` package dequantises, Debian's python3-torch runs a Llama written from
// llama.cpp's graph). Skipped, saying so, when the model or an oracle package is absent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "common/files.h"
#include "common/model_cache.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/tokenizers/tokenizer.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

std::string shell_output(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  if (pclose(pipe) != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

TEST(SmolLM2, LogitsMatchAnIndependentTorchForwardOnA512TokenWindow) {
  const fs::path model_path = *model_handle_path("smollm2-135m");
  if (!fs::exists(model_path)) GTEST_SKIP() << model_path << " is absent: run scripts/models to test the real model";
  // The oracle runs under Debian's python (python3-torch) with llama.cpp's pure-Python `gguf`
  // package borrowed from the python3 that scripts/test installs it for.
  const std::string gguf_dir = shell_output("python3 -c 'import gguf, os; print(os.path.dirname(os.path.dirname(gguf.__file__)))' 2>/dev/null");
  if (gguf_dir.empty()) GTEST_SKIP() << "the oracle needs the Python package gguf (pip install gguf; scripts/test does)";
  if (shell_output("/usr/bin/python3 -c 'import torch; print(1)' 2>/dev/null") != "1")
    GTEST_SKIP() << "the oracle needs Debian's python3-torch (scripts/setup installs it)";

  LoadedCheckpoint ck = load_checkpoint(model_path);
  Transformer model(ck.config, ck.weights, model_path.string());
  auto tokenizer = load_tokenizer(model_path);
  const std::string text = read_file(test::data_path("text/wikitext-2-raw-v1/test.joined.txt")).substr(0, 8000);
  std::vector<std::int32_t> ids = tokenizer->encode(text);
  ASSERT_GE(ids.size(), 512u);
  ids.resize(512);

  test::TempDir dir;
  test::write_bytes(dir / "tokens.i32", std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
  fs::create_directories(dir / "site");
  fs::create_symlink(fs::path(gguf_dir) / "gguf", dir / "site" / "gguf");
  const std::string command = "PYTHONPATH=" + (dir / "site").string() + " /usr/bin/python3 " +
                              test::repo_path("tests/oracle/llama_gguf_forward.py").string() + " " + model_path.string() +
                              " " + (dir / "tokens.i32").string() + " " + (dir / "logits.f32").string() + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "oracle failed: " << command;
  const std::string bytes = read_file(dir / "logits.f32");
  const std::int64_t V = ck.config.vocab_size, L = 512;
  ASSERT_EQ(bytes.size(), static_cast<std::size_t>(L * V * 4));
  at::Tensor expected = at::from_blob(const_cast<char*>(bytes.data()), {L, V}, at::kFloat).clone();

  std::vector<std::int64_t> ids64(ids.begin(), ids.end());
  at::Tensor got = model.forward(at::tensor(ids64, at::kLong).unsqueeze(0)).squeeze(0);  // [L, V]
  ASSERT_EQ(got.sizes(), expected.sizes());

  const double max_logit = expected.abs().max().item<double>();
  const double max_diff = (got - expected).abs().max().item<double>();
  at::Tensor top_got = got.argmax(-1), top_expected = expected.argmax(-1);
  const std::int64_t top1_differs = (top_got != top_expected).sum().item<std::int64_t>();
  std::printf("SmolLM2 512-token window: max |logit| %.4f, max |Δlogit| %.3g (%.3g of max |logit|), top-1 differs at %lld of %lld\n",
              max_logit, max_diff, max_diff / max_logit, static_cast<long long>(top1_differs), static_cast<long long>(L));
  EXPECT_LE(max_diff, 1e-3 * max_logit);
  EXPECT_EQ(top1_differs, 0);
}

}  // namespace
}  // namespace qeval
