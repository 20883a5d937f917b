#include <gtest/gtest.h>

#include <limits>

#include "model/transformer.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

TEST(Softmax1, MatchesDefinitionAndStaysFinite) {
  at::manual_seed(0);
  at::Tensor x = at::randn({3, 7}, at::kDouble) * 4;
  at::Tensor expected = x.exp() / (1 + x.exp().sum(-1, true));
  EXPECT_TRUE(test::tensors_close(softmax1(x), expected, 1e-12, 1e-12));
  at::Tensor big = at::full({1, 4}, 1000.0, at::kFloat);  // exp would overflow without the shift
  at::Tensor p = softmax1(big);
  EXPECT_TRUE(test::tensors_close(p, at::full({1, 4}, 0.25, at::kFloat), 1e-6));
  at::Tensor very_negative = at::full({1, 4}, -1000.0, at::kFloat);
  EXPECT_TRUE(test::tensors_close(softmax1(very_negative), at::zeros({1, 4}), 1e-30));
}

// Training differentiates softmax-1: its gradient must be the definition's, including rows with
// masked (-inf) entries as in causal attention.
TEST(Softmax1, GradientMatchesDefinition) {
  at::manual_seed(1);
  at::Tensor x = (at::randn({2, 5, 5}, at::kDouble) * 3)
                     .masked_fill(at::ones({5, 5}, at::kBool).triu(1), -std::numeric_limits<double>::infinity());
  at::Tensor upstream = at::randn({2, 5, 5}, at::kDouble);
  at::Tensor a = x.clone().requires_grad_(true);
  (softmax1(a) * upstream).sum().backward();
  at::Tensor b = x.clone().requires_grad_(true);
  at::Tensor e = b.exp();
  (e / (1 + e.sum(-1, true)) * upstream).sum().backward();
  EXPECT_TRUE(test::tensors_close(a.grad(), b.grad(), 1e-12, 1e-12));
}

}  // namespace
}  // namespace qeval
