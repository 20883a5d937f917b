// OrthoAdam's transforms: orthogonality, agreement with the dense Kronecker construction, and
// exact inversion of the randomised Hadamard transform. The Walsh–Hadamard reference is
// Sylvester's recursive definition, built independently of the butterfly code.
#include <gtest/gtest.h>

#include "tests/support/test_data.h"
#include "train/orthogonal.h"

namespace qeval::train {
namespace {

at::Tensor sylvester(std::int64_t n) {  // H_1 = [1], H_2n = [[H, H], [H, -H]]
  at::Tensor h = at::ones({1, 1}, at::kDouble);
  while (h.size(0) < n) h = at::cat({at::cat({h, h}, 1), at::cat({h, -h}, 1)}, 0);
  return h;
}

::testing::AssertionResult is_orthogonal(const at::Tensor& q) {
  const std::int64_t n = q.size(0);
  return test::tensors_close(q.t().matmul(q), at::eye(n, at::kDouble), 1e-5);
}

TEST(Orthogonal, DenseIsOrthogonalAndSeeded) {
  for (std::int64_t n : {1, 2, 3, 64, 130}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    AxisTransform t = AxisTransform::dense(n, 7);
    EXPECT_EQ(t.kind(), TransformKind::dense);
    at::Tensor q = t.matrix();
    EXPECT_TRUE(is_orthogonal(q));
    EXPECT_TRUE(test::tensors_close(q.matmul(q.t()), at::eye(n, at::kDouble), 1e-5));
    EXPECT_TRUE(test::tensors_equal(AxisTransform::dense(n, 7).matrix(), q));  // regenerated from the seed
    if (n > 1) EXPECT_FALSE(at::equal(AxisTransform::dense(n, 8).matrix(), q));
  }
}

TEST(Orthogonal, FwhtEqualsSylvesterHadamard) {
  for (std::int64_t b : {1, 2, 8, 64}) {
    SCOPED_TRACE("b = " + std::to_string(b));
    at::Tensor x = at::randn({3, b}, at::kDouble);
    at::Tensor expected = x.matmul(sylvester(b).t()) / std::sqrt(static_cast<double>(b));
    EXPECT_TRUE(test::tensors_close(fwht(x), expected, 1e-12));
  }
  EXPECT_THROW(fwht(at::zeros({2, 12}, at::kDouble)), std::exception);
}

TEST(Orthogonal, HadamardBlocksAreOrthogonalAndMatchTheirDefinition) {
  for (std::int64_t n : {8, 12, 100, 161}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    AxisTransform t = AxisTransform::hadamard(n, 11);
    std::int64_t sum = 0;
    for (std::int64_t b : t.blocks()) sum += b;
    EXPECT_EQ(sum, n);
    at::Tensor q = t.matrix();
    EXPECT_TRUE(is_orthogonal(q));
    // Every entry is ±1/sqrt(b) or 0: a signed, permuted Hadamard matrix, not a dense one.
    at::Tensor nz = q.abs() > 1e-12;
    EXPECT_EQ(nz.sum().item<std::int64_t>(), [&] {
      std::int64_t s = 0;
      for (std::int64_t b : t.blocks()) s += b * b;
      return s;
    }());
  }
  // Above dense_max, random() picks the Hadamard transform.
  EXPECT_EQ(AxisTransform::random(40, 1, /*dense_max=*/32).kind(), TransformKind::hadamard);
  EXPECT_EQ(AxisTransform::random(32, 1, /*dense_max=*/32).kind(), TransformKind::dense);
}

TEST(Orthogonal, HadamardInvertsToRounding) {
  AxisTransform t = AxisTransform::hadamard(5000, 3);  // 4096 + 512 + 256 + 128 + 8
  ASSERT_EQ(t.blocks(), (std::vector<std::int64_t>{4096, 512, 256, 128, 8}));
  at::Tensor x = at::randn({4, 5000}, at::kDouble);
  EXPECT_TRUE(test::tensors_close(t.apply(t.apply(x, 1, false), 1, true), x, 1e-12));
  at::Tensor xf = x.to(at::kFloat);
  EXPECT_TRUE(test::tensors_close(t.apply(t.apply(xf, 1, false), 1, true), xf, 1e-5));
  // Norm preserved.
  EXPECT_NEAR(t.apply(x, 1, false).norm().item<double>(), x.norm().item<double>(), 1e-9);
}

TEST(Orthogonal, PerAxisEqualsKroneckerOnFlattenedTensor) {
  {
    TensorTransform t({5, 7}, TransformKind::dense, 42);
    at::Tensor g = at::randn({5, 7}, at::kDouble);
    at::Tensor k = at::kron(t.axes()[0].matrix(), t.axes()[1].matrix());  // [35, 35]
    EXPECT_TRUE(is_orthogonal(k));
    EXPECT_TRUE(test::tensors_close(t.rotate(g).reshape({-1}), k.matmul(g.reshape({-1})), 1e-5));
    // Q_out G Q_inᵀ written out.
    EXPECT_TRUE(test::tensors_close(t.rotate(g), t.axes()[0].matrix().matmul(g).matmul(t.axes()[1].matrix().t()), 1e-5));
    EXPECT_TRUE(test::tensors_close(t.unrotate(g).reshape({-1}), k.t().matmul(g.reshape({-1})), 1e-5));
  }
  {
    TensorTransform t({2, 3, 4}, TransformKind::hadamard, 5);
    at::Tensor g = at::randn({2, 3, 4}, at::kDouble);
    at::Tensor k = at::kron(at::kron(t.axes()[0].matrix(), t.axes()[1].matrix()), t.axes()[2].matrix());
    EXPECT_TRUE(is_orthogonal(k));
    EXPECT_TRUE(test::tensors_close(t.rotate(g).reshape({-1}), k.matmul(g.reshape({-1})), 1e-12));
    EXPECT_TRUE(test::tensors_close(t.unrotate(t.rotate(g)), g, 1e-12));
  }
  {
    TensorTransform t({1}, TransformKind::dense, 5);  // RMSNormSingle's scalar gain: Q = [1]
    at::Tensor g = at::randn({1}, at::kFloat);
    EXPECT_TRUE(test::tensors_equal(t.rotate(g), g));
  }
}

TEST(Orthogonal, TransformSeedsDifferPerTensorAndAxis) {
  EXPECT_NE(transform_seed(0, "a", 0), transform_seed(0, "b", 0));
  EXPECT_NE(transform_seed(0, "a", 0), transform_seed(0, "a", 1));
  EXPECT_NE(transform_seed(0, "a", 0), transform_seed(1, "a", 0));
  EXPECT_EQ(transform_seed(3, "layers.0.attn.q.weight", 1), transform_seed(3, "layers.0.attn.q.weight", 1));
}

}  // namespace
}  // namespace qeval::train
