// int8 on the GPU against the CPU, layer by layer on a real window (issue 32): for the same
// quantised inputs the GPU's int32 sums equal the CPU's bit for bit, and the whole int8 linear
// (quantiser, GEMM, epilogue) gives the CPU's fp32 output bit for bit; fp16 inputs give the CPU
// result on their widened values, rounded once. Skips, visibly, without a CUDA device.
#include <gtest/gtest.h>

#include <mutex>

#include "kernels/int8_gemm.h"
#include "kernels/int8_linear.h"
#include "kernels/int8_quantize.h"
#include "loaders/checkpoints/checkpoint.h"
#include "model/transformer.h"
#include "quant/packed_weights.h"
#include "tests/support/gpu.h"
#include "tests/support/test_data.h"
#ifdef QEVAL_TORCH_HAS_CUDA
#include "kernels/cuda/adapter_torch.h"
#endif

namespace qeval {
namespace {

// Keeps a copy of every input its linear sees.
class InputTap final : public LinearDecorator {
 public:
  explicit InputTap(std::shared_ptr<const Linear> inner) : LinearDecorator(std::move(inner)) {}
  at::Tensor forward(const at::Tensor& x) const override {
    inputs_.push_back(x.detach().clone());
    return inner_->forward(x);
  }
  mutable std::vector<at::Tensor> inputs_;
};

TEST(GpuInt8, AccumulatorsAndLinearsMatchTheCpuLayerByLayerOnARealWindow) {
  QEVAL_SKIP_WITHOUT_GPU();
#ifndef QEVAL_TORCH_HAS_CUDA
  GTEST_SKIP() << "no CUDA adapter in this build";
#else
  LoadedCheckpoint ck = load_checkpoint(test::data_path("models/stories260K/stories260K.bin"));
  Transformer model(ck.config, ck.weights);
  std::vector<std::pair<std::string, std::shared_ptr<InputTap>>> taps;
  std::vector<std::pair<std::string, at::Tensor>> weights;
  for (const auto& named : model.linears()) {
    if (named.name == "lm_head") continue;
    auto* flt = dynamic_cast<const FloatLinear*>(named.linear.get());
    ASSERT_NE(flt, nullptr) << named.name;
    weights.emplace_back(named.name, flt->weight());
    auto tap = std::make_shared<InputTap>(named.linear);
    taps.emplace_back(named.name, tap);
  }
  for (const auto& [name, tap] : taps) model.replace_linear(name, tap);
  at::manual_seed(5);
  (void)model.forward(at::randint(ck.config.vocab_size, {2, 256}, at::kLong));  // a real forward pass's inputs

  const at::Device cuda(at::kCUDA, 0);
  QuantSpec per_channel;
  per_channel.kind = QuantKind::int8_absmax;
  per_channel.granularity = Granularity::channel;
  std::int64_t layers = 0;
  for (std::size_t i = 0; i < taps.size(); ++i) {
    const std::string& name = taps[i].first;
    SCOPED_TRACE(name);
    ASSERT_EQ(taps[i].second->inputs_.size(), 1u);
    const at::Tensor x = taps[i].second->inputs_[0];  // [B, L, K] fp32
    const std::int64_t B = x.size(0), L = x.size(1), K = x.size(2);
    const at::Tensor rows = x.reshape({B * L, K});
    const Int8Weight w = quantize_int8_weight(weights[i].second, per_channel, name);
    // 1. The integer sums for the same quantised inputs.
    const kernels::Int8Rows a = kernels::quantize_int8_rows(rows, 1);
    const at::Tensor cpu_acc = kernels::int8_matmul_acc(a.q, w.q, kernels::Int8GemmBackend::reference);  // float(int32)
    const at::Tensor gpu_acc = kernels::cuda::int8_matmul_s32_cuda(a.q.to(cuda), w.q.to(cuda)).cpu();
    ASSERT_LT(cpu_acc.abs().max().item<double>(), 16777216.0);  // float holds these sums exactly
    EXPECT_TRUE(gpu_acc.to(at::kFloat).equal(cpu_acc)) << "int32 sums differ";
    // 2. The whole int8 linear (per token and per sequence of L rows), fp32 out: bit for bit.
    for (std::int64_t rows_per_scale : {std::int64_t{1}, L}) {
      const at::Tensor cpu_y = kernels::int8_linear(rows, rows_per_scale, w.q, w.scales, at::Tensor());
      const at::Tensor gpu_y =
          kernels::int8_linear(rows.to(cuda), rows_per_scale, w.q.to(cuda), w.scales.to(cuda), at::Tensor()).cpu();
      EXPECT_TRUE(gpu_y.equal(cpu_y)) << "rows per scale " << rows_per_scale << ": max |Δ| "
                                      << (gpu_y - cpu_y).abs().max().item<double>();
      // fp16 inputs: the CPU maths on their widened values, rounded once to fp16.
      const at::Tensor half = rows.to(at::kHalf);
      const at::Tensor cpu_h = kernels::int8_linear(half.to(at::kFloat), rows_per_scale, w.q, w.scales, at::Tensor()).to(at::kHalf);
      const at::Tensor gpu_h =
          kernels::int8_linear(half.to(cuda), rows_per_scale, w.q.to(cuda), w.scales.to(cuda), at::Tensor()).cpu();
      EXPECT_TRUE(gpu_h.equal(cpu_h)) << "fp16, rows per scale " << rows_per_scale;
    }
    ++layers;
  }
  EXPECT_GT(layers, 0);
#endif
}

}  // namespace
}  // namespace qeval
