// Gemma-3-270M (Q4_K_M GGUF, scripts/models --model gemma3-270m): qeval's logits on real
// WikiText-2 windows against an independent forward pass (tests/oracle/gemma3_gguf_forward.py:
// llama.cpp's `gguf` package dequantises, numpy runs a Gemma-3 written from Hugging Face's
// modeling_gemma3.py and llama.cpp's gemma3 graph). A 512-token window (every layer sees the
// whole window) must give the same top-1 token at every position and max |Δlogit| <=
// 1e-3 · max |logit|; a 1024-token window checks the local layers' 512-key sliding window,
// where it bites, to the same bounds. When llama-cpp-python is there ($QEVAL_LLAMACPP_PYTHON,
// else python3), llama.cpp's own logits are printed beside them as a second opinion (its
// quantised kernels differ by more than rounding; tests/oracle/llamacpp_logits.py).
// Skipped, saying so, when the model or the oracle's packages (gguf, numpy) are absent.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "common/files.h"
#include "common/model_cache.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/tokenizers/tokenizer.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;

// A shell word in single quotes (paths here have none).
std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

bool python_imports(const std::string& python, const std::string& modules) {
  const std::string cmd = shell_quote(python) + " -c 'import " + modules + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

std::string llamacpp_python() {
  const char* env = std::getenv("QEVAL_LLAMACPP_PYTHON");
  return env != nullptr && *env != '\0' ? env : "python3";
}

// python3 when it has gguf and numpy, else the llama-cpp-python venv's python when it does; "" if neither.
std::string oracle_python() {
  for (const std::string& p : {std::string("python3"), llamacpp_python()})
    if (python_imports(p, "gguf, numpy")) return p;
  return "";
}

at::Tensor read_logits(const fs::path& path, std::int64_t L, std::int64_t V) {
  const std::string bytes = read_file(path);
  EXPECT_EQ(bytes.size(), static_cast<std::size_t>(L * V * 4)) << path;
  if (bytes.size() != static_cast<std::size_t>(L * V * 4)) return {};
  return at::from_blob(const_cast<char*>(bytes.data()), {L, V}, at::kFloat).clone();
}

void check_window(std::int64_t L) {
  const fs::path model_path = *model_handle_path("gemma3-270m");
  if (!fs::exists(model_path))
    GTEST_SKIP() << model_path << " is absent: run scripts/models --model gemma3-270m to test the real model";
  const std::string python = oracle_python();
  if (python.empty())
    GTEST_SKIP() << "the oracle needs python3 (or $QEVAL_LLAMACPP_PYTHON) with the packages gguf and numpy";

  LoadedCheckpoint ck = load_checkpoint(model_path);
  Transformer model(ck.config, ck.weights, model_path.string());
  auto tokenizer = load_tokenizer(model_path);
  // A window as protocol `windows` makes it for this tokenizer by default: BOS, then text.
  const std::string text = read_file(test::data_path("text/wikitext-2-raw-v1/test.joined.txt")).substr(0, 20000);
  std::vector<std::int32_t> ids = {*tokenizer->bos_id()};
  const std::vector<std::int32_t> body = tokenizer->encode(text);
  ASSERT_GE(static_cast<std::int64_t>(body.size()), L);
  ids.insert(ids.end(), body.begin(), body.begin() + (L - 1));

  test::TempDir dir;
  test::write_bytes(dir / "tokens.i32", std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
  const std::string command = shell_quote(python) + " " + shell_quote(test::repo_path("tests/oracle/gemma3_gguf_forward.py")) +
                              " " + shell_quote(model_path) + " " + shell_quote(dir / "tokens.i32") + " " +
                              shell_quote(dir / "logits.f32") + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "oracle failed: " << command;
  const std::int64_t V = ck.config.vocab_size;
  at::Tensor expected = read_logits(dir / "logits.f32", L, V);
  ASSERT_TRUE(expected.defined());

  std::vector<std::int64_t> ids64(ids.begin(), ids.end());
  at::Tensor got = model.forward(at::tensor(ids64, at::kLong).unsqueeze(0)).squeeze(0);  // [L, V]
  ASSERT_EQ(got.sizes(), expected.sizes());

  const double max_logit = expected.abs().max().item<double>();
  const double max_diff = (got - expected).abs().max().item<double>();
  const std::int64_t top1_differs = (got.argmax(-1) != expected.argmax(-1)).sum().item<std::int64_t>();
  std::printf("Gemma-3-270M %lld-token window vs the numpy oracle: max |logit| %.4f, max |Δlogit| %.3g (%.3g of max "
              "|logit|), top-1 differs at %lld of %lld\n",
              static_cast<long long>(L), max_logit, max_diff, max_diff / max_logit, static_cast<long long>(top1_differs),
              static_cast<long long>(L));
  EXPECT_LE(max_diff, 1e-3 * max_logit);
  EXPECT_EQ(top1_differs, 0);

  // llama.cpp as a second opinion: printed, held only to a loose agreement.
  if (!python_imports(llamacpp_python(), "llama_cpp, numpy")) {
    std::printf("llama.cpp second opinion not run: %s cannot import llama_cpp\n", llamacpp_python().c_str());
    return;
  }
  const std::string second = shell_quote(llamacpp_python()) + " " + shell_quote(test::repo_path("tests/oracle/llamacpp_logits.py")) +
                             " " + shell_quote(model_path) + " " + shell_quote(dir / "tokens.i32") + " " +
                             shell_quote(dir / "llamacpp.f32") + " 2>&1";
  ASSERT_EQ(std::system(second.c_str()), 0) << "llama.cpp failed: " << second;
  at::Tensor llamacpp = read_logits(dir / "llamacpp.f32", L, V);
  ASSERT_TRUE(llamacpp.defined());
  const at::Tensor top_llamacpp = llamacpp.argmax(-1);
  const double agree_qeval = (got.argmax(-1) == top_llamacpp).to(at::kDouble).mean().item<double>();
  const double agree_oracle = (expected.argmax(-1) == top_llamacpp).to(at::kDouble).mean().item<double>();
  const double diff_qeval = (got - llamacpp).abs().max().item<double>();
  const double diff_oracle = (expected - llamacpp).abs().max().item<double>();
  std::printf("  llama.cpp (llama-cpp-python, logits_all): top-1 agrees with qeval at %.1f %%, with the oracle at %.1f %%; "
              "max |Δlogit| %.3g vs qeval, %.3g vs the oracle\n",
              100 * agree_qeval, 100 * agree_oracle, diff_qeval, diff_oracle);
  EXPECT_GE(agree_qeval, 0.9);
}

TEST(Gemma3, LogitsMatchAnIndependentForwardOnA512TokenWindow) { check_window(512); }

// At 1024 tokens the five local layers of every six see only the last 512 keys.
TEST(Gemma3, LogitsMatchAnIndependentForwardOnA1024TokenWindowWhereTheSlidingWindowBites) { check_window(1024); }

}  // namespace
}  // namespace qeval
