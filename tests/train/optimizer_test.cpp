// Optimizers: OrthoAdam with Q = I equals Adam bit for bit; Adam, AdamW and SGD agree with
// LibTorch's torch::optim implementations (an independent reference); one OrthoAdam step
// equals Algorithm 1 written with the dense Kronecker matrix; state round-trips exactly.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "tests/support/test_data.h"
#include "common/error.h"
#include "train/optimizer.h"

namespace qeval::train {
namespace {

const std::vector<std::vector<std::int64_t>> kShapes = {{5, 7}, {7}, {1}, {2, 3, 4}};

std::vector<NamedParameter> make_params(std::uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<NamedParameter> out;
  for (std::size_t i = 0; i < kShapes.size(); ++i)
    out.push_back({"p" + std::to_string(i), at::randn(kShapes[i], gen, at::kFloat).requires_grad_(true)});
  return out;
}

// A gradient that depends on the parameters (pull towards a target) plus step-dependent noise,
// so trajectories diverge if any update differs.
void set_gradients(const std::vector<at::Tensor>& params, std::int64_t step) {
  at::Generator gen = at::detail::createCPUGenerator(1000 + static_cast<std::uint64_t>(step));
  at::NoGradGuard no_grad;
  for (const auto& p : params) {
    at::Tensor noise = at::randn(p.sizes(), gen, at::kFloat);
    p.mutable_grad() = 2 * (p.detach() - 0.5) + noise;
  }
}

std::vector<at::Tensor> tensors(const std::vector<NamedParameter>& ps) {
  std::vector<at::Tensor> out;
  for (const auto& p : ps) out.push_back(p.tensor);
  return out;
}

void run(Optimizer& opt, int steps, double lr) {
  for (int s = 0; s < steps; ++s) {
    set_gradients(tensors(opt.parameters()), s);
    opt.step(lr);
  }
}

TEST(Optimizer, OrthoAdamWithIdentityTransformsEqualsAdamBitForBit) {
  for (const char* mode : {"l2", "decoupled"}) {
    SCOPED_TRACE(mode);
    OptimizerOptions adam;
    adam.kind = "adam";
    adam.weight_decay = 0.1;
    adam.weight_decay_mode = mode;
    OptimizerOptions ortho = adam;
    ortho.kind = "orthoadam";
    ortho.transform = "identity";
    auto a = make_optimizer(make_params(1), adam);
    auto b = make_optimizer(make_params(1), ortho);
    run(*a, 10, 1e-2);
    run(*b, 10, 1e-2);
    for (std::size_t i = 0; i < kShapes.size(); ++i)
      EXPECT_TRUE(test::tensors_equal(b->parameters()[i].tensor.detach(), a->parameters()[i].tensor.detach()))
          << "parameter " << i;
    // And a real transform does change the trajectory.
    ortho.transform = "random";
    auto c = make_optimizer(make_params(1), ortho);
    run(*c, 10, 1e-2);
    EXPECT_FALSE(at::equal(c->parameters()[0].tensor.detach(), a->parameters()[0].tensor.detach()));
  }
}

TEST(Optimizer, AdamAdamWAndSgdAgreeWithTorchOptim) {
  const double lr = 1e-2;
  {
    auto ours_params = make_params(2);
    OptimizerOptions o;
    o.kind = "adam";
    o.beta1 = 0.9, o.beta2 = 0.95, o.eps = 1e-8, o.weight_decay = 0.05;
    auto ours = make_optimizer(ours_params, o);
    auto ref_params = tensors(make_params(2));
    torch::optim::Adam ref(ref_params, torch::optim::AdamOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.05));
    for (int s = 0; s < 10; ++s) {
      set_gradients(tensors(ours_params), s);
      ours->step(lr);
      set_gradients(ref_params, s);
      ref.step();
    }
    for (std::size_t i = 0; i < kShapes.size(); ++i)
      EXPECT_TRUE(test::tensors_close(ours_params[i].tensor.detach(), ref_params[i].detach(), 1e-6, 1e-5)) << "adam " << i;
  }
  {
    auto ours_params = make_params(3);
    OptimizerOptions o;
    o.kind = "adamw";
    o.weight_decay = 0.1;
    auto ours = make_optimizer(ours_params, o);
    auto ref_params = tensors(make_params(3));
    torch::optim::AdamW ref(ref_params, torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
    for (int s = 0; s < 10; ++s) {
      set_gradients(tensors(ours_params), s);
      ours->step(lr);
      set_gradients(ref_params, s);
      ref.step();
    }
    for (std::size_t i = 0; i < kShapes.size(); ++i)
      EXPECT_TRUE(test::tensors_close(ours_params[i].tensor.detach(), ref_params[i].detach(), 1e-6, 1e-5)) << "adamw " << i;
  }
  {
    auto ours_params = make_params(4);
    OptimizerOptions o;
    o.kind = "sgd";
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    auto ours = make_optimizer(ours_params, o);
    auto ref_params = tensors(make_params(4));
    torch::optim::SGD ref(ref_params, torch::optim::SGDOptions(lr).momentum(0.9).weight_decay(0.01));
    for (int s = 0; s < 10; ++s) {
      set_gradients(tensors(ours_params), s);
      ours->step(lr);
      set_gradients(ref_params, s);
      ref.step();
    }
    for (std::size_t i = 0; i < kShapes.size(); ++i)
      EXPECT_TRUE(test::tensors_close(ours_params[i].tensor.detach(), ref_params[i].detach(), 1e-6, 1e-5)) << "sgd " << i;
  }
}

TEST(Optimizer, OrthoAdamStepsEqualAlgorithmOneWithTheKroneckerMatrix) {
  // Two steps on a [5, 7] tensor, recomputed in float64 on the flattened tensor with
  // K = Q_out ⊗ Q_in: m, v in the rotated basis, the step rotated back with Kᵀ.
  OptimizerOptions o;
  o.kind = "orthoadam";
  o.transform_seed = 9;
  const double lr = 1e-2, b1 = o.beta1, b2 = o.beta2, eps = o.eps;
  std::vector<NamedParameter> ps = {{"w", at::randn({5, 7}, at::kFloat).requires_grad_(true)}};
  at::Tensor p = ps[0].tensor.detach().to(at::kDouble).reshape({-1});
  auto opt = make_optimizer(ps, o);
  TensorTransform t({5, 7}, TransformKind::dense, transform_seed(9, "w", -1));
  at::Tensor k = at::kron(t.axes()[0].matrix(), t.axes()[1].matrix());
  at::Tensor m = at::zeros({35}, at::kDouble), v = at::zeros({35}, at::kDouble);
  for (int s = 1; s <= 2; ++s) {
    set_gradients({ps[0].tensor}, s);
    at::Tensor g = ps[0].tensor.grad().to(at::kDouble).reshape({-1});
    opt->step(lr);
    at::Tensor gr = k.matmul(g);
    m = b1 * m + (1 - b1) * gr;
    v = b2 * v + (1 - b2) * gr * gr;
    at::Tensor u = m / (v.sqrt() / std::sqrt(1 - std::pow(b2, s)) + eps);
    p = p - lr / (1 - std::pow(b1, s)) * k.t().matmul(u);
    // set_gradients reads p from the optimizer's tensor, so both follow the same gradients.
    EXPECT_TRUE(test::tensors_close(ps[0].tensor.detach().to(at::kDouble).reshape({-1}), p, 1e-5)) << "step " << s;
  }
}

TEST(Optimizer, StateRoundTripContinuesBitIdentically) {
  for (const char* kind : {"orthoadam", "adamw", "sgd"}) {
    SCOPED_TRACE(kind);
    OptimizerOptions o;
    o.kind = kind;
    o.transform_seed = 4;
    auto straight = make_optimizer(make_params(5), o);
    run(*straight, 6, 1e-2);

    auto first = make_optimizer(make_params(5), o);
    run(*first, 3, 1e-2);
    std::vector<NamedParameter> copy;
    for (const auto& p : first->parameters())
      copy.push_back({p.name, p.tensor.detach().clone().requires_grad_(true)});
    auto second = make_optimizer(copy, o);
    second->load_state(first->state_header(), first->state_tensors(), "test state");
    EXPECT_EQ(second->steps_taken(), 3);
    for (int s = 3; s < 6; ++s) {
      set_gradients(tensors(second->parameters()), s);
      second->step(1e-2);
    }
    for (std::size_t i = 0; i < kShapes.size(); ++i)
      EXPECT_TRUE(test::tensors_equal(second->parameters()[i].tensor.detach(), straight->parameters()[i].tensor.detach()))
          << "parameter " << i;
  }
}

TEST(Optimizer, RejectsBadOptionsAndMismatchedState) {
  OptimizerOptions o;
  o.kind = "lion";
  EXPECT_THROW(make_optimizer(make_params(1), o), Error);
  o.kind = "adam";
  o.beta2 = 1.0;
  EXPECT_THROW(make_optimizer(make_params(1), o), Error);
  o = OptimizerOptions{};
  o.kind = "orthoadam";
  auto a = make_optimizer(make_params(1), o);
  run(*a, 1, 1e-2);
  o.transform_seed = 1;  // moments live in another basis
  auto b = make_optimizer(make_params(1), o);
  EXPECT_THROW(b->load_state(a->state_header(), a->state_tensors(), "state"), Error);
  o.transform_seed = 0;
  auto c = make_optimizer(make_params(1), o);
  auto tensors = a->state_tensors();
  tensors.erase("p0.exp_avg");
  EXPECT_THROW(c->load_state(a->state_header(), tensors, "state"), Error);
}

}  // namespace
}  // namespace qeval::train
