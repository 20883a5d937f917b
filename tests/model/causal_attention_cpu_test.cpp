#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <limits>
#include <vector>

#include "kernels/compute_threads.h"
#include "kernels/fp32_gemm.h"
#include "model/causal_attention_cpu.h"
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
      ASSERT_EQ(blocked_causal_attention_applies(q),
                kernels::fp32_gemm_cpu_backend() == kernels::Fp32GemmBackend::aten);
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

}  // namespace
}  // namespace qeval
