// The fast state-space operations against their sequential references on random inputs
// (model/ssm_scan.h): the CPU selective scan and the chunked log-depth scan, the chunked SSD for
// chunk lengths that do and do not divide L, the causal depthwise convolution against LibTorch's
// conv1d, and the implicit attention of the SSD against the duality written out by loops.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "model/ssm_scan.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

struct ScanInputs {
  at::Tensor u, delta, A, B, C, D;
};

ScanInputs scan_inputs(at::ScalarType dtype, std::int64_t Bn, std::int64_t L, std::int64_t E, std::int64_t N) {
  at::manual_seed(7);
  const auto o = at::TensorOptions().dtype(dtype);
  return {at::randn({Bn, L, E}, o), at::softplus(at::randn({Bn, L, E}, o) - 1.0), -at::rand({E, N}, o) * 4 - 0.1,
          at::randn({Bn, L, N}, o), at::randn({Bn, L, N}, o), at::randn({E}, o)};
}

TEST(SelectiveScan, FastFormsMatchTheSequentialReference) {
  for (auto dtype : {at::kDouble, at::kFloat}) {
    const ScanInputs s = scan_inputs(dtype, 2, 37, 12, 5);
    const at::Tensor ref = selective_scan_reference(s.u, s.delta, s.A, s.B, s.C, s.D);
    const double tol = dtype == at::kDouble ? 1e-12 : 2e-5;
    for (std::int64_t chunk : {1, 4, 16, 37, 64}) {
      EXPECT_TRUE(test::tensors_close(selective_scan_cpu(s.u, s.delta, s.A, s.B, s.C, s.D, chunk), ref, tol)) << chunk;
      EXPECT_TRUE(test::tensors_close(selective_scan_chunked(s.u, s.delta, s.A, s.B, s.C, s.D, chunk), ref, tol)) << chunk;
    }
    EXPECT_TRUE(test::tensors_close(selective_scan(s.u, s.delta, s.A, s.B, s.C, s.D), ref, tol));
  }
}

TEST(SelectiveScan, EachSequenceIsItsOwn) {
  const ScanInputs s = scan_inputs(at::kFloat, 3, 20, 8, 4);
  const at::Tensor all = selective_scan(s.u, s.delta, s.A, s.B, s.C, s.D);
  const at::Tensor one = selective_scan(s.u.narrow(0, 1, 1), s.delta.narrow(0, 1, 1), s.A, s.B.narrow(0, 1, 1),
                                        s.C.narrow(0, 1, 1), s.D);
  EXPECT_TRUE(all.narrow(0, 1, 1).equal(one));
}

TEST(CausalConv, MatchesLibTorchConv1d) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({2, 9, 6}, at::kDouble), w = at::randn({6, 4}, at::kDouble), b = at::randn({6}, at::kDouble);
  const at::Tensor ref = at::conv1d(x.transpose(1, 2), w.unsqueeze(1), b, 1, 3, 1, 6).narrow(2, 0, 9).transpose(1, 2);
  EXPECT_TRUE(test::tensors_close(causal_depthwise_conv1d(x, w, b), ref, 1e-12));
}

struct SsdInputs {
  at::Tensor x, dt, A, B, C, D;
};

SsdInputs ssd_inputs(at::ScalarType dtype, std::int64_t L) {
  at::manual_seed(11);
  const auto o = at::TensorOptions().dtype(dtype);
  const std::int64_t Bn = 2, H = 4, P = 3, G = 2, N = 5;
  return {at::randn({Bn, L, H, P}, o), at::softplus(at::randn({Bn, L, H}, o) - 1), -at::rand({H}, o) * 3 - 0.1,
          at::randn({Bn, L, G, N}, o), at::randn({Bn, L, G, N}, o), at::randn({H}, o)};
}

TEST(Ssd, ChunkedMatchesTheRecurrence) {
  for (auto dtype : {at::kDouble, at::kFloat}) {
    const SsdInputs s = ssd_inputs(dtype, 23);
    const at::Tensor ref = ssd_reference(s.x, s.dt, s.A, s.B, s.C, s.D);
    const double tol = dtype == at::kDouble ? 1e-12 : 5e-5;
    for (std::int64_t chunk : {1, 4, 5, 23, 64})
      EXPECT_TRUE(test::tensors_close(ssd_chunked(s.x, s.dt, s.A, s.B, s.C, s.D, chunk), ref, tol)) << chunk;
  }
}

TEST(Ssd, ImplicitAttentionIsTheNormalisedDuality) {
  const std::int64_t L = 9, H = 4, G = 2;
  const SsdInputs s = ssd_inputs(at::kDouble, L);
  const at::Tensor W = ssd_implicit_attention(s.dt, s.A, s.B, s.C, H);  // [B, H, L, L]
  ASSERT_EQ(W.sizes(), (std::vector<std::int64_t>{2, H, L, L}));
  auto acc = W.accessor<float, 4>();
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / (H / G);
      for (std::int64_t i = 0; i < L; ++i) {
        // M[i, j] = (C_i · B_j) exp(Σ_{k=j+1..i} Δ_k a) Δ_j, then |M| / Σ_j |M|.
        std::vector<double> m(static_cast<std::size_t>(i + 1));
        double total = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double decay = 0;
          for (std::int64_t k = j + 1; k <= i; ++k) decay += s.dt[b][k][h].item<double>() * s.A[h].item<double>();
          const double cb = (s.C[b][i][g] * s.B[b][j][g]).sum().item<double>();
          m[static_cast<std::size_t>(j)] = std::abs(cb * std::exp(decay) * s.dt[b][j][h].item<double>());
          total += m[static_cast<std::size_t>(j)];
        }
        for (std::int64_t j = 0; j < L; ++j) {
          const double expected = j <= i ? m[static_cast<std::size_t>(j)] / total : 0.0;
          EXPECT_NEAR(acc[b][h][i][j], expected, 1e-6) << b << " " << h << " " << i << " " << j;
        }
      }
    }
}

}  // namespace
}  // namespace qeval
