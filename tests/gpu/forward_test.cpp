// The forward pass placed on a GPU in fp32 against the CPU forward (issue 32): logits and every
// block's hidden state, on stories260K, both shared HF fixtures (also against their independent
// reference) and a random model of GPT-2 small's shape. Skips, visibly, without a CUDA device.
#include <gtest/gtest.h>

#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/init.h"
#include "model/placement.h"
#include "model/transformer.h"
#include "tests/support/gpu.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

class HiddenOnCpu : public ForwardObserver {
 public:
  // A copy: the hidden state is the live residual stream, updated in place by the next block (on
  // the CPU, .to(kFloat).cpu() of a float CPU tensor is the same tensor).
  void on_block_output(std::int64_t, const at::Tensor& hidden) override {
    hidden_.push_back(hidden.detach().to(at::kFloat).cpu().clone());
  }
  at::Tensor stacked() const { return at::stack(hidden_, 1); }  // [B, layer, L, D]

 private:
  std::vector<at::Tensor> hidden_;
};

// Largest |got − expected| over the largest |expected|: the error relative to the tensor's scale.
double scaled_error(const at::Tensor& got, const at::Tensor& expected) {
  return (got - expected).abs().max().item<double>() / std::max(expected.abs().max().item<double>(), 1e-30);
}

// CPU fp32 and GPU fp32 forwards of `model` on `ids`: logits within 1e-5 and hidden states within
// 1e-4 of their scale. Returns the GPU logits (on the CPU).
at::Tensor check_against_cpu(const Transformer& model, const at::Tensor& ids) {
  PlacementCache cache(Placement{at::Device(at::kCUDA, 0), at::kFloat});
  const Transformer gpu = model.placed(cache);
  HiddenOnCpu cpu_hidden, gpu_hidden;
  const at::Tensor cpu_logits = model.forward(ids, &cpu_hidden);
  const at::Tensor gpu_logits = gpu.forward(ids, &gpu_hidden).cpu();
  EXPECT_TRUE(gpu_logits.is_same_size(cpu_logits));
  const double logit_error = scaled_error(gpu_logits, cpu_logits);
  const double hidden_error = scaled_error(gpu_hidden.stacked(), cpu_hidden.stacked());
  EXPECT_LE(logit_error, 1e-5);
  EXPECT_LE(hidden_error, 1e-4);
  std::cout << "  GPU fp32 vs CPU: max |Δlogit| / max |logit| = " << logit_error
            << ", max |Δhidden| / max |hidden| = " << hidden_error << "\n";
  return gpu_logits;
}

TEST(GpuForward, Stories260kMatchesTheCpu) {
  QEVAL_SKIP_WITHOUT_GPU();
  LoadedCheckpoint ck = load_checkpoint(test::data_path("models/stories260K/stories260K.bin"));
  Transformer model(ck.config, ck.weights);
  at::manual_seed(1);
  check_against_cpu(model, at::randint(ck.config.vocab_size, {2, 256}, at::kLong));
}

TEST(GpuForward, SharedFixturesMatchTheCpuAndTheirReference) {
  QEVAL_SKIP_WITHOUT_GPU();
  for (const std::string folder : {"tiny-gpt2-hf", "tiny-llama-hf"}) {
    SCOPED_TRACE(folder);
    const auto dir = test::data_path("fixtures/" + folder);
    const auto reference = read_safetensors(dir / "reference.safetensors");
    LoadedCheckpoint ck = load_checkpoint(dir);
    Transformer model(ck.config, ck.weights, dir.string());
    const at::Tensor logits = check_against_cpu(model, reference.at("input_ids"));
    EXPECT_TRUE(test::tensors_close(logits, reference.at("logits_softmax"), 1e-4));
  }
}

// Issue 50: the six mixture-of-experts and state-space fixtures (their layers run LibTorch ops on a
// GPU: the chunked log-depth selective scan, the SSD's chunks, experts gathered per sequence) in
// fp32 on the device against the CPU, and against their independent reference as on the CPU.
TEST(GpuForward, MixtureOfExpertsAndStateSpaceFixturesMatchTheCpu) {
  QEVAL_SKIP_WITHOUT_GPU();
  for (const std::string folder : {"tiny-mixtral-hf", "tiny-qwen2-moe-hf", "tiny-qwen3-moe-hf", "tiny-mamba-hf",
                                   "tiny-mamba2-hf", "tiny-jamba-hf"}) {
    SCOPED_TRACE(folder);
    std::cout << folder << ":\n";
    const auto dir = test::repo_path("tests/model/fixtures/" + folder);
    const auto reference = read_safetensors(dir / "reference.safetensors");
    LoadedCheckpoint ck = load_checkpoint(dir);
    Transformer model(ck.config, ck.weights, dir.string());
    const at::Tensor logits = check_against_cpu(model, reference.at("input_ids"));
    EXPECT_TRUE(test::tensors_close(logits, reference.at("logits"), 1e-4));
  }
}

TEST(GpuForward, RandomGpt2SmallShapeMatchesTheCpu) {
  QEVAL_SKIP_WITHOUT_GPU();
  const ModelConfig config = gpt2_small_config();
  Transformer model(config, init_weights(config, 3));
  at::manual_seed(2);
  check_against_cpu(model, at::randint(config.vocab_size, {2, 128}, at::kLong));
}

TEST(GpuForward, HalfPrecisionStaysCloseToFp32) {
  QEVAL_SKIP_WITHOUT_GPU();
  LoadedCheckpoint ck = load_checkpoint(test::data_path("models/stories260K/stories260K.bin"));
  Transformer model(ck.config, ck.weights);
  at::manual_seed(1);
  const at::Tensor ids = at::randint(ck.config.vocab_size, {2, 256}, at::kLong);
  const at::Tensor reference = at::log_softmax(model.forward(ids), -1);
  for (at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    PlacementCache cache(Placement{at::Device(at::kCUDA, 0), dtype});
    const Transformer gpu = model.placed(cache);
    const at::Tensor lp = at::log_softmax(gpu.forward(ids).to(at::kFloat), -1).cpu();
    const double mean_abs = (lp - reference).abs().mean().item<double>();
    std::cout << "  " << dtype_name(dtype) << ": mean |Δ log p| against CPU fp32 = " << mean_abs << "\n";
    EXPECT_LT(mean_abs, dtype == at::kHalf ? 0.01 : 0.05) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace qeval
