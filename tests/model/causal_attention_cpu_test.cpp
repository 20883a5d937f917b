#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/compute_threads.h"
#include "kernels/cpu/fused_attention_cpu.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/causal_attention_cpu.h"
#include "model/observer.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

// [L, L]: 0 where query i sees key j (j ≤ i, and i - j < window when there is one), -inf elsewhere.
at::Tensor causal_mask(std::int64_t L, std::int64_t window, at::ScalarType dtype) {
  at::Tensor i = at::arange(L).unsqueeze(1), j = at::arange(L).unsqueeze(0);
  at::Tensor hidden = j > i;
  if (window > 0) hidden = hidden.logical_or(i - j >= window);
  return at::zeros({L, L}, dtype).masked_fill_(hidden, -std::numeric_limits<double>::infinity());
}

struct Case {
  std::int64_t L, H, Hkv, window;
  bool softmax_one;
};

// The whole [L, L] attention of every head in float64: the definition the blocks must reproduce.
at::Tensor reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const Case& c, double scale,
                     at::Tensor* probs) {
  at::Tensor kd = k.to(at::kDouble).repeat_interleave(c.H / c.Hkv, 1), vd = v.to(at::kDouble).repeat_interleave(c.H / c.Hkv, 1);
  at::Tensor scores = at::matmul(q.to(at::kDouble), kd.transpose(-1, -2)) * scale + causal_mask(c.L, c.window, at::kDouble);
  *probs = c.softmax_one ? softmax1(scores) : at::softmax(scores, -1);
  const std::int64_t B = q.size(0), hd = q.size(3);
  return at::matmul(*probs, vd).transpose(1, 2).reshape({B, c.L, c.H * hd});
}

// Against the float64 definition (lengths that are and are not multiples of the block, grouped-query
// heads, sliding windows shorter and longer than a block, softmax-1), with the probabilities the
// observers get (0 where hidden), and the same bits for 1, 2 and 3 threads.
TEST(BlockedCausalAttention, MatchesTheWholeMatrixDefinitionForEveryThreadCount) {
  const int before = at::get_num_threads();
  const std::vector<Case> cases = {{200, 6, 2, 0, false}, {128, 4, 4, 0, true}, {300, 4, 1, 70, false},
                                   {257, 2, 2, 130, true}, {1, 3, 3, 0, false}};
  at::manual_seed(5);
  for (const Case& c : cases) {
    const std::int64_t B = 2, hd = 16;
    const double scale = 0.25;
    at::Tensor q = at::randn({B, c.H, c.L, hd}) * 2, k = at::randn({B, c.Hkv, c.L, hd}), v = at::randn({B, c.Hkv, c.L, hd});
    const at::Tensor mask = causal_mask(c.L, c.window, at::kFloat);
    auto probabilities = [&](at::Tensor s, const at::Tensor& m) {
      s.add_(m);
      return c.softmax_one ? softmax1(s) : at::softmax(s, -1);
    };
    std::vector<at::Tensor> outs, probs;
    for (int threads : {1, 2, 3}) {
      kernels::set_inference_threads(threads);
      ASSERT_TRUE(blocked_causal_attention_applies(q)) << "CPU inference, whichever the fp32 GEMM";
      at::Tensor p;
      outs.push_back(blocked_causal_attention(q, k, v, mask, c.window, scale, probabilities, &p));
      probs.push_back(p);
    }
    kernels::set_compute_threads(before);
    EXPECT_FALSE(blocked_causal_attention_applies(q)) << "only under inference threading";
    at::Tensor expected_probs;
    const at::Tensor expected = reference(q, k, v, c, scale, &expected_probs);
    const std::string name = "L " + std::to_string(c.L) + ", window " + std::to_string(c.window);
    EXPECT_TRUE(test::tensors_close(outs[0], expected.to(at::kFloat), 2e-5, 2e-5)) << name;
    EXPECT_TRUE(test::tensors_close(probs[0], expected_probs.to(at::kFloat), 1e-6, 1e-5)) << name;
    // Hidden entries are exactly 0, as the whole-matrix softmax makes them.
    EXPECT_EQ(probs[0].masked_select(at::isinf(mask).expand_as(probs[0])).abs().sum().item<float>(), 0.0f) << name;
    for (int t : {1, 2}) {
      EXPECT_TRUE(test::tensors_equal(outs[0], outs[t])) << name << ": 1 and " << t + 1 << " threads differ";
      EXPECT_TRUE(test::tensors_equal(probs[0], probs[t])) << name << ": 1 and " << t + 1 << " threads differ";
    }
  }
}

TEST(BlockedCausalAttention, RefusesShapesThatDoNotFit) {
  at::Tensor q = at::randn({1, 3, 8, 4}), k = at::randn({1, 2, 8, 4});  // 3 query heads over 2 kv heads
  auto probabilities = [](at::Tensor s, const at::Tensor& m) { return at::softmax(s.add_(m), -1); };
  EXPECT_THROW(blocked_causal_attention(q, k, k, causal_mask(8, 0, at::kFloat), 0, 1.0, probabilities), c10::Error);
  // A mask of another length would be read in blocks without complaint: only the check refuses it.
  at::Tensor q2 = at::randn({1, 2, 8, 4}), k2 = at::randn({1, 2, 8, 4});
  EXPECT_THROW(blocked_causal_attention(q2, k2, k2, causal_mask(9, 0, at::kFloat), 0, 1.0, probabilities), c10::Error);
}

// The variants of the fused kernel this CPU runs (AVX2 and, where there is AVX-512, AVX-512).
std::vector<kernels::cpu::FusedAttentionIsa> fused_variants_here() {
  std::vector<kernels::cpu::FusedAttentionIsa> here;
  const auto best = kernels::cpu::widest_cpu_isa();
  if (best != kernels::cpu::FusedAttentionIsa::none) here.push_back(kernels::cpu::FusedAttentionIsa::avx2);
  if (best == kernels::cpu::FusedAttentionIsa::avx512) here.push_back(best);
  return here;
}

// Each variant of the fused kernel against the same float64 definition: head dims with and without
// a tail of the variant's lanes, lengths around the key panels and 6-query tiles, grouped-query
// heads, windows shorter than a panel, shorter and longer than a block, softmax-1, and scores
// spread wide enough that e^(s - max) underflows. Its output is the same bits with and without the
// probabilities, and for 1, 2 and 3 threads.
TEST(FusedCausalAttention, MatchesTheWholeMatrixDefinitionForEveryThreadCount) {
  const auto variants = fused_variants_here();
  if (variants.empty()) GTEST_SKIP() << "this CPU lacks AVX2 or FMA";
  struct FusedCase {
    Case c;
    std::int64_t hd;
    double spread;  // scale of q: 30 puts many e^(s - max) below float's range
  };
  const std::vector<FusedCase> cases = {{{200, 6, 2, 0, false}, 64, 2},  {{128, 4, 4, 0, true}, 24, 2},
                                        {{300, 4, 1, 70, false}, 16, 2}, {{257, 2, 2, 130, true}, 64, 2},
                                        {{1, 3, 3, 0, false}, 8, 2},     {{77, 2, 1, 5, true}, 40, 2},
                                        {{150, 2, 2, 0, false}, 64, 30}, {{90, 2, 2, 0, true}, 16, 30},
                                        {{333, 2, 1, 0, false}, 48, 2},  {{70, 2, 2, 20, true}, 32, 2}};
  at::manual_seed(7);
  int served = 0;
  for (const auto isa : variants) {
    for (const FusedCase& f : cases) {
      const Case& c = f.c;
      const std::int64_t B = 2;
      const double scale = 1.0 / std::sqrt(static_cast<double>(f.hd));
      at::Tensor q = at::randn({B, c.H, c.L, f.hd}) * f.spread, k = at::randn({B, c.Hkv, c.L, f.hd}),
                 v = at::randn({B, c.Hkv, c.L, f.hd});
      const std::int64_t lanes = isa == kernels::cpu::FusedAttentionIsa::avx512 ? 16 : 8;
      ASSERT_EQ(kernels::cpu::fused_causal_attention_fits(q, k, v, isa), f.hd % lanes == 0);
      if (f.hd % lanes != 0) continue;
      ++served;
      std::vector<at::Tensor> outs;
      at::Tensor probs;
      for (int threads : {1, 2, 3}) {
        at::set_num_threads(threads);
        outs.push_back(kernels::cpu::fused_causal_attention(q, k, v, c.window, scale, c.softmax_one, nullptr, isa));
      }
      const at::Tensor with_probs = kernels::cpu::fused_causal_attention(q, k, v, c.window, scale, c.softmax_one, &probs, isa);
      at::set_num_threads(1);
      at::Tensor expected_probs;
      const at::Tensor expected = reference(q, k, v, c, scale, &expected_probs);
      const std::string name = std::string(kernels::cpu::cpu_isa_name(isa)) + ", L " + std::to_string(c.L) +
                               ", hd " + std::to_string(f.hd) + ", window " + std::to_string(c.window) + ", spread " +
                               std::to_string(f.spread);
      // Scores of magnitude ~spread carry float32 rounding of ~spread · 2⁻²⁴ each, which e^s turns into
      // relative errors of the probabilities of that size: the tolerances grow with the spread.
      const double wide = f.spread / 2;
      EXPECT_TRUE(test::tensors_close(outs[0], expected.to(at::kFloat), 2e-5 * wide, 2e-5 * wide)) << name;
      EXPECT_TRUE(test::tensors_close(probs, expected_probs.to(at::kFloat), 1e-6 * wide, 1e-5 * wide)) << name;
      const at::Tensor hidden = at::isinf(causal_mask(c.L, c.window, at::kFloat)).expand_as(probs);
      EXPECT_EQ(probs.masked_select(hidden).abs().sum().item<float>(), 0.0f) << name;
      EXPECT_TRUE(test::tensors_equal(outs[0], with_probs)) << name << ": the probabilities moved the output";
      for (int t : {1, 2})
        EXPECT_TRUE(test::tensors_equal(outs[0], outs[t])) << name << ": 1 and " << t + 1 << " threads differ";
    }
  }
  EXPECT_GE(served, 6 * static_cast<int>(variants.size()));
}

// q, k and v as the model hands them over: views of [B, L, heads, hd] projections, positions
// heads·hd apart. The same bits as from contiguous copies, in every variant.
TEST(FusedCausalAttention, ReadsStridedViewsInPlace) {
  const auto variants = fused_variants_here();
  if (variants.empty()) GTEST_SKIP() << "this CPU lacks AVX2 or FMA";
  at::manual_seed(8);
  const std::int64_t B = 2, L = 100, H = 6, Hkv = 2, hd = 32;
  at::Tensor q = at::randn({B, L, H, hd}).transpose(1, 2), k = at::randn({B, L, Hkv, hd}).transpose(1, 2),
             v = at::randn({B, L, Hkv, hd}).transpose(1, 2);
  ASSERT_FALSE(q.is_contiguous());
  for (const auto isa : variants)
    EXPECT_TRUE(test::tensors_equal(
        kernels::cpu::fused_causal_attention(q, k, v, 0, 0.2, false, nullptr, isa),
        kernels::cpu::fused_causal_attention(q.contiguous(), k.contiguous(), v.contiguous(), 0, 0.2, false, nullptr, isa)))
        << kernels::cpu::cpu_isa_name(isa);
}

TEST(FusedCausalAttention, RefusesWhatItDoesNotServe) {
  using kernels::cpu::FusedAttentionIsa;
  const at::Tensor q = at::randn({1, 2, 8, 12});  // head dim 12: not a multiple of 8
  for (const auto isa : {FusedAttentionIsa::avx2, FusedAttentionIsa::avx512, FusedAttentionIsa::none}) {
    EXPECT_FALSE(kernels::cpu::fused_causal_attention_fits(q, q, q, isa));
    EXPECT_THROW(kernels::cpu::fused_causal_attention(q, q, q, 0, 1.0, false, nullptr, isa), c10::Error);
  }
  EXPECT_EQ(kernels::cpu::fused_attention_isa_for(q, q, q), FusedAttentionIsa::none);
  const at::Tensor h24 = at::randn({1, 2, 8, 24});  // AVX2 only: not a multiple of 16
  EXPECT_FALSE(kernels::cpu::fused_causal_attention_fits(h24, h24, h24, FusedAttentionIsa::avx512));
  EXPECT_NE(kernels::cpu::fused_attention_isa_for(h24, h24, h24), FusedAttentionIsa::avx512);
  const at::Tensor q3 = at::randn({1, 3, 8, 16}), k2 = at::randn({1, 2, 8, 16});  // 3 query heads over 2 kv heads
  for (const auto isa : {FusedAttentionIsa::avx2, FusedAttentionIsa::avx512}) {
    EXPECT_FALSE(kernels::cpu::fused_causal_attention_fits(q3, k2, k2, isa));
    EXPECT_FALSE(kernels::cpu::fused_causal_attention_fits(q3.to(at::kDouble), q3.to(at::kDouble), q3.to(at::kDouble), isa));
    EXPECT_FALSE(kernels::cpu::fused_causal_attention_fits(q3, at::randn({1, 3, 9, 16}), at::randn({1, 3, 9, 16}), isa));
  }
}

// Asks for every layer's probabilities and only checks their shape, as statistics passes would.
class WantsAllAttention : public ForwardObserver {
 public:
  bool wants_attention(std::int64_t) const override { return true; }
  void on_attention(std::int64_t, const at::Tensor& probs) override { ++layers_seen; EXPECT_EQ(probs.dim(), 4); }
  int layers_seen = 0;
};

// The families' fixtures forward as `qeval eval` runs them (inference threading: the fused kernel
// where the head dim allows, 8 for GPT-NeoX, Phi-3 with its window and Qwen3; the op-by-op blocks for
// the others, heads of 4 and Gemma-3's 12): within 1e-4 of Hugging Face's logits, and the same
// bits whether statistics take the probabilities or not.
TEST(CpuAttentionInTheModel, MatchesTheFixturesAndIgnoresObservers) {
  const int before = at::get_num_threads();
  kernels::set_inference_threads(2);
  for (const char* folder : {"tiny-gpt-neox-hf", "tiny-phi3-hf", "tiny-qwen3-hf", "tiny-mistral-hf", "tiny-gemma3-hf"}) {
    SCOPED_TRACE(folder);
    const auto dir = test::repo_path(std::string("tests/model/fixtures/") + folder);
    const auto reference = read_safetensors(dir / "reference.safetensors");
    LoadedCheckpoint ckpt = load_checkpoint(dir);
    Transformer model(ckpt.config, ckpt.weights, dir.string());
    const at::Tensor ids = reference.at("input_ids");
    at::NoGradGuard no_grad;
    const at::Tensor plain = model.forward(ids);
    WantsAllAttention observer;
    const at::Tensor observed = model.forward(ids, &observer);
    EXPECT_EQ(observer.layers_seen, ckpt.config.n_layers);
    EXPECT_TRUE(test::tensors_close(plain, reference.at("logits"), 1e-4));
    EXPECT_TRUE(test::tensors_equal(plain, observed)) << "the probabilities moved the logits";
  }
  kernels::set_compute_threads(before);
}

}  // namespace
}  // namespace qeval
