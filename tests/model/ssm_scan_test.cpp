// The fast state-space operations against their sequential references on random inputs
// (model/ssm_scan.h): the CPU selective scan and the chunked log-depth scan, the chunked SSD for
// chunk lengths that do and do not divide L, the causal depthwise convolution against LibTorch's
// conv1d, and the implicit attention of the SSD against the duality written out by loops; and the
// gradients training takes through the scan, the convolution and the SSD against autograd through
// the references.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "model/selective_scan_trainable.h"
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

// Gradients of `f` with respect to each of `inputs` (leaves that require grad), for the loss Σ f(inputs) · w.
std::vector<at::Tensor> gradients(const std::vector<at::Tensor>& inputs, const at::Tensor& w,
                                  const std::function<at::Tensor(const std::vector<at::Tensor>&)>& f) {
  for (const auto& t : inputs) t.mutable_grad() = at::Tensor();
  (f(inputs) * w).sum().backward();
  std::vector<at::Tensor> out;
  for (const auto& t : inputs) out.push_back(t.grad().clone());
  return out;
}

// Training (autograd) runs the trainable CPU scan (the dispatcher sends gradients there, not to
// the raw CPU loop) and, on other devices, the chunked scan: their gradients with respect to every
// operand equal autograd's through the sequential reference on random float64 inputs, for chunks
// that do and do not divide L; and the reference's against a central difference on one element
// of each operand.
TEST(SelectiveScan, GradientsMatchTheReference) {
  const ScanInputs s = scan_inputs(at::kDouble, 2, 19, 6, 4);
  std::vector<at::Tensor> inputs;
  for (const at::Tensor& t : {s.u, s.delta, s.A, s.B, s.C, s.D}) inputs.push_back(t.clone().requires_grad_(true));
  const at::Tensor w = at::randn({2, 19, 6}, at::kDouble);
  auto reference = [](const std::vector<at::Tensor>& x) {
    return selective_scan_reference(x[0], x[1], x[2], x[3], x[4], x[5]);
  };
  const auto expected = gradients(inputs, w, reference);
  const char* names[] = {"u", "delta", "A", "B", "C", "D"};
  struct Form {
    const char* name;
    std::int64_t chunk;
  };
  for (const Form& form : {Form{"selective_scan", 0}, Form{"trainable", 4}, Form{"trainable", 7}, Form{"trainable", 19},
                           Form{"trainable", 32}, Form{"chunked", 4}, Form{"chunked", 19}, Form{"chunked", 32}}) {
    auto scan = [form](const std::vector<at::Tensor>& x) {
      if (form.chunk == 0) return selective_scan(x[0], x[1], x[2], x[3], x[4], x[5]);
      if (std::string(form.name) == "trainable")
        return selective_scan_cpu_trainable(x[0], x[1], x[2], x[3], x[4], x[5], form.chunk);
      return selective_scan_chunked(x[0], x[1], x[2], x[3], x[4], x[5], form.chunk);
    };
    ASSERT_TRUE(scan(inputs).requires_grad()) << form.name << ", chunk " << form.chunk;
    const auto got = gradients(inputs, w, scan);
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(test::tensors_close(got[i], expected[i], 1e-11, 1e-10))
          << "d/d" << names[i] << ", " << form.name << ", chunk " << form.chunk;
  }
  // The oracle itself: a central difference on one element of each operand.
  at::NoGradGuard no_grad;
  const double h = 1e-6;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::vector<at::Tensor> plus, minus;
    for (const auto& t : inputs) plus.push_back(t.detach().clone()), minus.push_back(t.detach().clone());
    const std::int64_t k = plus[i].numel() / 2;
    plus[i].view({-1})[k] += h;
    minus[i].view({-1})[k] -= h;
    const double numeric = ((reference(plus) * w).sum().item<double>() - (reference(minus) * w).sum().item<double>()) / (2 * h);
    EXPECT_NEAR(expected[i].reshape({-1})[k].item<double>(), numeric, 1e-6 * (1 + std::abs(numeric))) << "d/d" << names[i];
  }
}

// Training's forward is evaluation's: the trainable scan gives selective_scan_cpu's bits, with or
// without a gradient wanted.
TEST(SelectiveScan, TrainingForwardIsTheCpuLoop) {
  const ScanInputs s = scan_inputs(at::kFloat, 2, 19, 6, 4);
  const at::Tensor cpu = selective_scan_cpu(s.u, s.delta, s.A, s.B, s.C, s.D);
  EXPECT_TRUE(selective_scan(s.u, s.delta, s.A, s.B, s.C, s.D).equal(cpu));
  const at::Tensor u = s.u.clone().requires_grad_(true);
  EXPECT_TRUE(selective_scan(u, s.delta, s.A, s.B, s.C, s.D).equal(cpu));
  EXPECT_TRUE(selective_scan_cpu_trainable(u, s.delta, s.A, s.B, s.C, s.D, 4)
                  .equal(selective_scan_cpu(s.u, s.delta, s.A, s.B, s.C, s.D, 4)));
  at::NoGradGuard no_grad;
  EXPECT_TRUE(selective_scan(u, s.delta, s.A, s.B, s.C, s.D).equal(cpu));
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

// The convolution and Mamba-2's chunked SSD under autograd: gradients equal those through
// LibTorch's conv1d and through the SSD recurrence.
TEST(SsmGradients, ConvolutionAndSsdMatchTheirReferences) {
  at::manual_seed(5);
  std::vector<at::Tensor> conv_in = {at::randn({2, 9, 6}, at::kDouble).requires_grad_(true),
                                     at::randn({6, 4}, at::kDouble).requires_grad_(true),
                                     at::randn({6}, at::kDouble).requires_grad_(true)};
  const at::Tensor wc = at::randn({2, 9, 6}, at::kDouble);
  const auto conv_expected = gradients(conv_in, wc, [](const std::vector<at::Tensor>& x) {
    return at::conv1d(x[0].transpose(1, 2), x[1].unsqueeze(1), x[2], 1, 3, 1, 6).narrow(2, 0, 9).transpose(1, 2);
  });
  const auto conv_got = gradients(conv_in, wc, [](const std::vector<at::Tensor>& x) {
    return causal_depthwise_conv1d(x[0], x[1], x[2]);
  });
  for (std::size_t i = 0; i < conv_got.size(); ++i) EXPECT_TRUE(test::tensors_close(conv_got[i], conv_expected[i], 1e-12)) << i;

  const SsdInputs s = ssd_inputs(at::kDouble, 13);
  std::vector<at::Tensor> in;
  for (const at::Tensor& t : {s.x, s.dt, s.A, s.B, s.C, s.D}) in.push_back(t.clone().requires_grad_(true));
  const at::Tensor w = at::randn(s.x.sizes(), at::kDouble);
  const auto expected = gradients(in, w, [](const std::vector<at::Tensor>& x) {
    return ssd_reference(x[0], x[1], x[2], x[3], x[4], x[5]);
  });
  for (std::int64_t chunk : {4, 13}) {
    const auto got = gradients(in, w, [chunk](const std::vector<at::Tensor>& x) {
      return ssd_chunked(x[0], x[1], x[2], x[3], x[4], x[5], chunk);
    });
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(test::tensors_close(got[i], expected[i], 1e-11, 1e-10)) << "operand " << i << ", chunk " << chunk;
  }
}

}  // namespace
}  // namespace qeval
