#include <gtest/gtest.h>

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

}  // namespace
}  // namespace qeval
